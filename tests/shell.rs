//! The SQL shell, driven through a real pseudo-terminal.

use rexpect::session::spawn_command;
use std::process::Command;

fn shell(dir: &std::path::Path) -> rexpect::session::PtySession {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.env("WEIR_HISTORY", dir.join("history"))
        .env("WEIR_RUNTIME_DIR", dir.join("run"))
        .env("TERM", "dumb");
    let mut s = spawn_command(cmd, Some(30_000)).expect("spawn the shell");
    s.exp_string("Ctrl-D quits").unwrap();
    s
}

/// `weir ARGS…` beside a shell started by [`shell`] in `dir`: its standard output.
fn weir_beside(dir: &std::path::Path, args: &[&str]) -> String {
    let out = crate::common::weir()
        .env("WEIR_RUNTIME_DIR", dir.join("run"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "weir {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn shell_runs_statements_reports_errors_and_keeps_going() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut s = shell(dir.path());
    s.send_line("CREATE TABLE t (id BIGINT, k INT)").unwrap();
    s.send_line("  WITH ('connector' = 'datagen', 'number-of-rows' = '100', 'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '100', 'fields.k.min' = '0', 'fields.k.max' = '2');").unwrap();
    s.exp_string("[INFO] table 't' created").unwrap();
    // A typo: the error names the position and shows a caret; the shell goes on.
    s.send_line("SELECT id FROM t WHERE;").unwrap();
    s.exp_string("[ERROR] SQL error at line 1").unwrap();
    s.exp_string("^").unwrap();
    s.send_line("SET 'no.such.key' = '1';").unwrap();
    s.exp_string("known keys").unwrap();
    // DataFusion's functions and Flink's rewritten ones.
    s.send_line("SHOW FUNCTIONS;").unwrap();
    s.exp_string("| split_index ").unwrap();
    s.exp_string("| upper ").unwrap();
    // A bounded SELECT prints a table with its row count (and may aggregate).
    s.send_line("SELECT k, COUNT(*) AS n FROM t GROUP BY k ORDER BY k;")
        .unwrap();
    s.exp_string("3 row(s) in set").unwrap();
    // INSERT runs in the background; SHOW JOBS lists it.
    s.send_line(&format!(
        "CREATE TABLE d (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');",
        out.display()
    ))
    .unwrap();
    s.exp_string("created").unwrap();
    s.send_line("INSERT INTO d SELECT id FROM t;").unwrap();
    s.exp_string("Submitted job").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    s.send_line("SHOW JOBS;").unwrap();
    s.exp_string("FINISHED").unwrap();
    s.send_control('d').unwrap();
    s.exp_eof().unwrap();
    let lines = crate::common::committed_lines(&out);
    assert_eq!(lines.iter().filter(|l| *l != "id").count(), 100);
}

#[test]
fn ctrl_c_cancels_an_unbounded_select_and_keeps_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = shell(dir.path());
    s.send_line(
        "CREATE TABLE u (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '20');",
    )
    .unwrap();
    s.exp_string("created").unwrap();
    // Tableau mode: one table with a header and the change kinds, rows from both
    // subtasks and no subtask prefixes (unquoted SET keys, as Flink's client takes them).
    s.send_line("SET parallelism.default = 2;").unwrap();
    s.exp_string("'parallelism.default' = '2'").unwrap();
    s.send_line("SET sql-client.execution.result-mode = tableau;")
        .unwrap();
    s.exp_string("= 'tableau'").unwrap();
    s.send_line("SELECT id FROM u;").unwrap();
    s.exp_string("| op |                   id |").unwrap();
    let rows = s.exp_string("| +I |").unwrap();
    assert!(!rows.contains("1> ") && !rows.contains("2> "), "{rows}");
    s.exp_string("| +I |").unwrap();
    s.send_control('c').unwrap();
    let shown = s.exp_string("query cancelled").unwrap();
    assert!(shown.contains("Received a total of"), "{shown}");
    // The query is gone, not just detached: no row is printed after the cancellation
    // (at 20 rows/s, a second would show about 20).
    std::thread::sleep(std::time::Duration::from_secs(1));
    s.send_line("SHOW TABLES;").unwrap();
    let after = s.exp_string("| u ").unwrap();
    assert!(!after.contains("| +I |"), "rows after the cancel: {after}");
    // A LIMIT query ends by itself once its rows are shown; in the table mode (Flink's
    // default) the result is one table, shown when the query ends on a dumb terminal.
    s.send_line("RESET 'sql-client.execution.result-mode';")
        .unwrap();
    s.exp_string("configuration reset").unwrap();
    s.send_line("SELECT id FROM u LIMIT 3;").unwrap();
    let shown = s.exp_string("LIMIT 3 reached; query ended").unwrap();
    assert!(shown.contains("| id "), "{shown}");
    assert!(shown.contains("3 row(s) in result"), "{shown}");
    s.send_line("SHOW TABLES;").unwrap();
    s.exp_string("| u ").unwrap();
    s.send_control('d').unwrap();
    s.exp_eof().unwrap();
}

/// The SQL client's statement set, typed line by line: its INSERTs start one job.
#[test]
fn a_statement_set_runs_its_inserts_as_one_job() {
    let dir = tempfile::tempdir().unwrap();
    let (low, high) = (dir.path().join("low"), dir.path().join("high"));
    let mut s = shell(dir.path());
    s.send_line("CREATE TABLE t (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '100', 'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '100');").unwrap();
    s.exp_string("created").unwrap();
    for (name, path) in [("low", &low), ("high", &high)] {
        s.send_line(&format!(
            "CREATE TABLE {name} (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');",
            path.display()
        ))
        .unwrap();
        s.exp_string("created").unwrap();
    }
    s.send_line("BEGIN STATEMENT SET;").unwrap();
    s.send_line("INSERT INTO low SELECT id FROM t WHERE id <= 30;")
        .unwrap();
    s.send_line("INSERT INTO high SELECT id FROM t WHERE id > 30;")
        .unwrap();
    s.send_line("END;").unwrap();
    s.exp_string("Submitted job").unwrap();
    let started = std::time::Instant::now();
    loop {
        s.send_line("SHOW JOBS;").unwrap();
        let (_, status) = s.exp_regex("RUNNING|FINISHED").unwrap();
        if status == "FINISHED" {
            break;
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    s.send_line("SHOW JOBS;").unwrap();
    s.send_line("SHOW TABLES;").unwrap();
    let listed = s.exp_string("table name").unwrap();
    assert_eq!(listed.matches("FINISHED").count(), 1, "{listed}");
    s.send_control('d').unwrap();
    s.exp_eof().unwrap();
    use crate::common::committed_numbers;
    assert_eq!(committed_numbers(&low), (1..=30).collect::<Vec<_>>());
    assert_eq!(committed_numbers(&high), (31..=100).collect::<Vec<_>>());
}

/// A refused `STOP JOB … WITH SAVEPOINT` (no savepoint folder set) leaves the job
/// running: a later `STOP JOB` still finds it.
#[test]
fn a_refused_stop_with_savepoint_leaves_the_job_stoppable() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = shell(dir.path());
    s.send_line(
        "CREATE TABLE src (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '10');",
    )
    .unwrap();
    s.exp_string("created").unwrap();
    s.send_line("CREATE TABLE sink (id BIGINT) WITH ('connector' = 'blackhole');")
        .unwrap();
    s.exp_string("created").unwrap();
    s.send_line("INSERT INTO sink SELECT id FROM src;").unwrap();
    let (_, id) = s.exp_regex("[0-9a-f]{32}").unwrap();
    s.send_line(&format!("STOP JOB '{id}' WITH SAVEPOINT;"))
        .unwrap();
    s.exp_string("execution.checkpointing.savepoint-dir")
        .unwrap();
    s.send_line("SHOW JOBS;").unwrap();
    s.exp_string("RUNNING").unwrap();
    s.send_line(&format!("STOP JOB '{id}';")).unwrap();
    s.exp_string("cancelled").unwrap();
    s.send_control('d').unwrap();
    s.exp_eof().unwrap();
}

const SECRET_TABLE: &str = "CREATE TABLE vault (a INT) WITH ('connector' = 'filesystem', \
    'path' = 's3://bucket/vault', 'format' = 'csv', 's3.access-key' = 'AKIAVISIBLE', \
    's3.secret-key' = 'hunter2-secret-key');";

/// Flink masks sensitive option values as `******`: in `SHOW CREATE TABLE`, in debug
/// logs (a dependency logs every statement it parses) and in the shell's history file.
#[test]
fn secrets_are_masked_in_show_create_table_debug_logs_and_history() {
    let dir = tempfile::tempdir().unwrap();
    let secrets = ["hunter2-secret-key"];

    // A script run by the shell (Flink's `-f`), every debug log line on.
    let script = dir.path().join("vault.sql");
    std::fs::write(
        &script,
        format!("{SECRET_TABLE}\nSHOW CREATE TABLE vault;\n"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        // Every crate's debug lines, dependencies' too (a bare `debug` is Weir's only).
        .env("WEIR_LOG", "debug,weir=debug")
        .env("WEIR_HISTORY", dir.path().join("history"))
        .arg("shell")
        .arg("-f")
        .arg(&script)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("'s3.secret-key' = '******'")
            && stdout.contains("'s3.access-key' = 'AKIAVISIBLE'"),
        "SHOW CREATE TABLE must mask secrets and only them:\n{stdout}"
    );
    assert!(
        stderr.contains("DEBUG"),
        "the debug log was not on, the check below proves nothing:\n{stderr}"
    );
    for secret in secrets {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "'{secret}' was shown:\n{stdout}\n{stderr}"
        );
    }

    // Typed into the shell: the history keeps the statement, not the secrets.
    let history = dir.path().join("history");
    let mut s = shell(dir.path());
    s.send_line(SECRET_TABLE).unwrap();
    s.exp_string("[INFO] table 'vault' created").unwrap();
    s.send_control('d').unwrap();
    s.exp_eof().unwrap();
    let kept = std::fs::read_to_string(&history).unwrap();
    assert!(
        kept.contains("CREATE TABLE vault") && kept.contains("'s3.secret-key' = '******'"),
        "{kept}"
    );
    for secret in secrets {
        assert!(
            !kept.contains(secret),
            "the history kept '{secret}':\n{kept}"
        );
    }
}

/// HELP, QUIT and EXIT; `SET;` shows every key with its default; Ctrl-C during a bounded
/// SELECT (one that reads a slow bounded table) cancels it and keeps the shell, as often
/// as it is pressed.
#[test]
fn help_set_defaults_quit_and_ctrl_c_during_a_bounded_select() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = shell(dir.path());
    s.send_line("HELP;").unwrap();
    s.exp_string("STOP JOB 'id' [WITH SAVEPOINT] [DRAIN]")
        .unwrap();
    s.send_line("help").unwrap();
    s.exp_string("sql-client.execution.result-mode").unwrap();
    s.send_line("SET;").unwrap();
    s.exp_regex(r"\| execution\.runtime-mode +\| streaming +\| default +\|")
        .unwrap();
    let listed = s.exp_string("| table.local-time-zone ").unwrap();
    assert!(listed.contains("| restart-strategy.type "), "{listed}");
    s.send_line("SET execution.runtime-mode = batch;").unwrap();
    s.exp_string("'execution.runtime-mode' = 'batch'").unwrap();
    s.send_line("SET;").unwrap();
    s.exp_regex(r"\| execution\.runtime-mode +\| batch +\| session +\|")
        .unwrap();
    s.send_line("RESET;").unwrap();
    s.exp_string("configuration reset").unwrap();
    // 1000 rows at 10 rows/s: a bounded SELECT that takes 100 s unless cancelled.
    s.send_line("CREATE TABLE slow (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '1000', 'rows-per-second' = '10');").unwrap();
    s.exp_string("created").unwrap();
    for _ in 0..2 {
        s.send_line("SELECT COUNT(*) AS n FROM slow;").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(700));
        s.send_control('c').unwrap();
        s.exp_string("query cancelled").unwrap();
        s.send_line("SELECT 40 + 2 AS answer;").unwrap();
        s.exp_string("| 42 ").unwrap();
    }
    s.send_line("EXIT;").unwrap();
    s.exp_eof().unwrap();
    let mut s = shell(dir.path());
    s.send_line("quit").unwrap();
    s.exp_eof().unwrap();
}

/// `weir shell -f` stops at the first failing statement and exits with 1; the statements
/// after it do not run.
#[test]
fn a_script_stops_at_its_first_error_with_a_failing_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("after");
    let script = dir.path().join("broken.sql");
    std::fs::write(
        &script,
        format!(
            "CREATE TABLE t (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '3');\n\
             SELECT nope FROM t;\n\
             CREATE TABLE d (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
             INSERT INTO d SELECT id FROM t;\n",
            marker.display()
        ),
    )
    .unwrap();
    let out = crate::common::weir()
        .env("WEIR_HISTORY", dir.path().join("history"))
        .env("WEIR_RUNTIME_DIR", dir.path().join("run"))
        .args(["shell", "-f"])
        .arg(&script)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("nope"), "{stderr}");
    assert!(!marker.exists(), "a statement after the error ran");
}

/// A job started in the shell is seen by `weir list` and stopped with a savepoint by
/// `weir stop`; `SET 'execution.savepoint.path'` then starts the same INSERT from that
/// savepoint, and the two runs together commit every row exactly once.
#[test]
fn shell_jobs_are_listed_and_stopped_from_outside_and_resume_from_a_savepoint() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let savepoints = dir.path().join("savepoints");
    let mut s = shell(dir.path());
    s.send_line(&format!(
        "SET 'execution.checkpointing.savepoint-dir' = '{}';",
        savepoints.display()
    ))
    .unwrap();
    s.exp_string("savepoint-dir").unwrap();
    s.send_line(&format!(
        "SET 'execution.checkpointing.dir' = '{}';",
        dir.path().join("checkpoints").display()
    ))
    .unwrap();
    s.exp_string("checkpointing.dir").unwrap();
    s.send_line("SET 'execution.checkpointing.interval' = '500 ms';")
        .unwrap();
    s.exp_string("interval").unwrap();
    // 1..=200 at 40 rows/s: about 5 s.
    s.send_line("CREATE TABLE src (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '40', 'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '200');").unwrap();
    s.exp_string("created").unwrap();
    s.send_line(&format!(
        "CREATE TABLE d (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');",
        out.display()
    ))
    .unwrap();
    s.exp_string("created").unwrap();
    s.send_line("INSERT INTO d SELECT id FROM src;").unwrap();
    let (_, id) = s.exp_regex("[0-9a-f]{32}").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let listed = weir_beside(dir.path(), &["list"]);
    assert!(
        listed.contains(&id) && listed.contains("RUNNING"),
        "{listed}"
    );
    let stopped = weir_beside(dir.path(), &["stop", &id[..8]]);
    let savepoint = stopped
        .trim()
        .strip_prefix("Savepoint completed. Path: ")
        .unwrap_or_else(|| panic!("{stopped}"))
        .to_string();
    let first = crate::common::committed_numbers(&out);
    assert!(
        !first.is_empty() && first.len() < 200,
        "the first run committed {} rows",
        first.len()
    );
    s.send_line(&format!("SET 'execution.savepoint.path' = '{savepoint}';"))
        .unwrap();
    s.exp_string("savepoint.path").unwrap();
    s.send_line("INSERT INTO d SELECT id FROM src;").unwrap();
    s.exp_string("restored from").unwrap();
    // An ended job leaves `weir list` by itself.
    let started = std::time::Instant::now();
    while !weir_beside(dir.path(), &["list"]).trim().is_empty() {
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    s.send_line("SHOW JOBS;").unwrap();
    s.send_line("SHOW TABLES;").unwrap();
    let listed = s.exp_string("table name").unwrap();
    assert_eq!(listed.matches("FINISHED").count(), 2, "{listed}");
    s.send_control('d').unwrap();
    s.exp_eof().unwrap();
    assert_eq!(
        crate::common::committed_numbers(&out),
        (1..=200).collect::<Vec<_>>()
    );
}
