//! The `delta` connector, checked by an independent reader: delta-rs's Python package
//! (`tests/delta/read.py`, `pip install deltalake pyarrow`) reads the tables Weir writes,
//! locally and on the local S3 server, while jobs are SIGKILLed and restored.

use crate::common::*;
use crate::crash::kill_checkpointed_until_done;
use std::path::Path;

/// Whether delta-rs's Python package is there; `false` (loudly) outside CI.
fn deltalake() -> bool {
    let works = std::process::Command::new("python3")
        .args(["-c", "import deltalake, pyarrow"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !works {
        assert!(
            std::env::var("CI").is_err(),
            "deltalake is required in CI (pip install deltalake pyarrow)"
        );
        eprintln!("\n*** SKIPPING DELTA TEST: pip install deltalake pyarrow ***\n");
    }
    works
}

/// Runs `read.py` on `table` with `args`: its output lines.
fn read(table: &str, args: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    let out = reader(table, args, env).output().expect("run read.py");
    assert!(
        out.status.success(),
        "read.py {table} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn reader(table: &str, args: &[&str], env: &[(&str, &str)]) -> std::process::Command {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/delta/read.py");
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(script).arg(table).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// `read.py TABLE watch`: an independent reader that reads every snapshot it can until
/// stopped, failing on one that is not whole, holds a row twice or lost one.
struct Watcher {
    child: std::process::Child,
    stop: std::path::PathBuf,
}

impl Watcher {
    /// Starts watching `table`; `dir` holds the file that stops it.
    fn start(table: &str, env: &[(&str, &str)], dir: &Path) -> Self {
        let stop = dir.join("stop-watching");
        let child = reader(table, &["watch", "120", stop.to_str().unwrap()], env)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        Self { child, stop }
    }

    /// Stops the reader, asserts it saw nothing wrong and returns what it read (reads,
    /// versions, most rows).
    fn stop(self) -> String {
        std::fs::write(&self.stop, "").unwrap();
        let watched = self.child.wait_with_output().unwrap();
        assert!(
            watched.status.success(),
            "a reader saw an uncommitted or inconsistent snapshot: {}",
            String::from_utf8_lossy(&watched.stderr)
        );
        String::from_utf8_lossy(&watched.stdout).trim().to_string()
    }
}

fn summary(table: &str, env: &[(&str, &str)]) -> serde_json::Value {
    let lines = read(table, &["summary"], env);
    serde_json::from_str(&lines[0]).unwrap()
}

const JOB: &str = "
CREATE TABLE src (id BIGINT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '${rate}',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '${rows}'
);
CREATE TABLE dst (id BIGINT, name STRING, day STRING) PARTITIONED BY (day) WITH (
  'connector' = 'delta', 'path' = '${out}', 'sink.rolling-policy.file-size' = '16kb'${extra}
);
INSERT INTO dst SELECT id, CONCAT('n', CAST(id * 7 AS STRING)), CONCAT('d', CAST(id % 3 AS STRING))
FROM src WHERE id % 10 <> 4;
";

fn script(dir: &Path, out: &str, rows: u64, rate: u64) -> String {
    script_with(dir, out, rows, rate, "")
}

/// [`script`] with more options for the Delta table (`, 'k' = 'v'`).
fn script_with(dir: &Path, out: &str, rows: u64, rate: u64, extra: &str) -> String {
    let text = render(
        JOB,
        &[
            ("out", out),
            ("rows", &rows.to_string()),
            ("rate", &rate.to_string()),
            ("extra", extra),
        ],
    );
    write_script(dir, "job.sql", &text)
        .to_str()
        .unwrap()
        .to_string()
}

/// The rows of [`JOB`] as `read.py` prints them.
fn expected(rows: u64) -> Vec<String> {
    let mut out: Vec<String> = (1..=rows)
        .filter(|id| id % 10 != 4)
        .map(|id| {
            format!(
                "{{\"day\": \"d{}\", \"id\": {id}, \"name\": \"n{}\"}}",
                id % 3,
                id * 7
            )
        })
        .collect();
    out.sort();
    out
}

/// The application transactions (`txn` actions) of a local table's commits, in version
/// order: `(app id, version)`.
fn txns(table: &Path) -> Vec<(String, i64)> {
    let commits = std::fs::read_dir(table.join("_delta_log"))
        .unwrap()
        .flatten()
        .map(|e| {
            let path = e.path();
            let body = std::fs::read(&path).unwrap();
            (path.to_string_lossy().to_string(), body)
        })
        .collect();
    txns_of(commits)
}

/// [`txns`] of the log's objects, `(path, contents)`.
fn txns_of(mut objects: Vec<(String, Vec<u8>)>) -> Vec<(String, i64)> {
    objects.retain(|(path, _)| path.ends_with(".json"));
    objects.sort();
    let mut out = Vec::new();
    for (_, body) in objects {
        for line in String::from_utf8(body).unwrap().lines() {
            let action: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(txn) = action.get("txn") {
                out.push((
                    txn["appId"].as_str().unwrap().to_string(),
                    txn["version"].as_i64().unwrap(),
                ));
            }
        }
    }
    out
}

/// Checks that every application's transaction versions only grow: no checkpoint was
/// committed twice.
fn assert_no_recommit(txns: &[(String, i64)]) {
    let mut last = std::collections::HashMap::new();
    for (app, version) in txns {
        if let Some(before) = last.insert(app.clone(), *version) {
            assert!(
                *version > before,
                "checkpoint {version} of {app} committed after {before} ({} commits)",
                txns.len()
            );
        }
    }
}

#[test]
fn a_bounded_job_writes_a_delta_table_delta_rs_reads() {
    if !deltalake() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let table = tmp.path().join("table");
    let rows = 5_000;
    let job = script(tmp.path(), table.to_str().unwrap(), rows, 20_000);
    let chk = tmp.path().join("chk");
    run_ok(&[
        &job,
        "-p",
        "2",
        "--checkpoint-dir",
        chk.to_str().unwrap(),
        "--checkpoint-interval",
        "100 ms",
    ]);
    let got = read(table.to_str().unwrap(), &["rows"], &[]);
    assert_eq!(got, expected(rows));
    let s = summary(table.to_str().unwrap(), &[]);
    assert_eq!(s["partitions"], serde_json::json!(["day"]));
    // Every file's statistics carry its row count.
    assert_eq!(s["records_in_stats"], serde_json::json!(got.len()));
    let operations = s["operations"].as_array().unwrap();
    assert_eq!(operations[0], "CREATE TABLE");
    assert!(
        operations.len() > 2 && operations[1..].iter().all(|o| o == "WRITE"),
        "one WRITE per checkpoint with data: {operations:?}"
    );
    // One transaction per checkpoint, for both subtasks' files.
    let txns = txns(&table);
    assert_eq!(txns.len(), operations.len() - 1);
    assert_no_recommit(&txns);

    // A second run of the script, started from scratch on the same checkpoint folder (so
    // with the same lineage, and checkpoint ids from 1 again), appends to the table.
    run_ok(&[
        &job,
        "-p",
        "1",
        "--checkpoint-dir",
        chk.to_str().unwrap(),
        "--checkpoint-interval",
        "100 ms",
    ]);
    let got = read(table.to_str().unwrap(), &["rows"], &[]);
    let mut twice: Vec<String> = expected(rows)
        .into_iter()
        .flat_map(|r| [r.clone(), r])
        .collect();
    twice.sort();
    assert!(
        got == twice,
        "after a second run from scratch: {} rows, expected each of {} twice",
        got.len(),
        expected(rows).len()
    );
}

#[test]
fn delta_sink_is_exactly_once_under_sigkill_with_readers_watching() {
    if !deltalake() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let table = tmp.path().join("table");
    let rows = 30_000;
    // With auto-compaction: each commit's small files are rewritten in a second
    // transaction, which a kill may interrupt too.
    let s = script_with(
        tmp.path(),
        table.to_str().unwrap(),
        rows,
        2_500,
        ", 'auto-compaction' = 'true', 'compaction.file-size' = '64kb'",
    );
    let chk = tmp.path().join("chk");
    // An independent reader reads every snapshot it can while the job is killed again and
    // again: each must be whole, with no row twice and none of an earlier one missing.
    let watcher = Watcher::start(table.to_str().unwrap(), &[], tmp.path());
    let kills = kill_checkpointed_until_done(&s, chk.to_str().unwrap(), "150 ms", &[], 20, 11);
    let watched = watcher.stop();
    let got = read(table.to_str().unwrap(), &["rows"], &[]);
    eprintln!(
        "crash test (Delta, local): {kills} SIGKILLs, {} rows checked, reader: {}",
        got.len(),
        watched
    );
    assert!(kills >= 20, "only {kills} kills");
    crate::crash::assert_same_rows(got, &expected(rows), "Delta table after SIGKILLs");
    assert_no_recommit(&txns(&table));
    let s = summary(table.to_str().unwrap(), &[]);
    let operations = s["operations"].as_array().unwrap();
    let optimized = operations.iter().filter(|o| *o == "OPTIMIZE").count();
    assert!(
        optimized > operations.len() / 4,
        "auto-compaction ran {optimized} times in {} versions",
        operations.len()
    );
    assert_eq!(
        s["records_in_stats"],
        serde_json::json!(expected(rows).len())
    );
}

#[test]
fn delta_sink_on_s3_is_exactly_once_under_sigkill() {
    let Some(s3) = crate::s3::server() else {
        return;
    };
    if !deltalake() {
        return;
    }
    s3.create_bucket("delta");
    let tmp = tempfile::tempdir().unwrap();
    let rows = 20_000;
    let s = script(tmp.path(), "s3://delta/table", rows, 2_500);
    let env = s3.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // A reader on the S3 table too, while the job is killed and restored.
    let watcher = Watcher::start("s3://delta/table", &env, tmp.path());
    let kills = kill_checkpointed_until_done(&s, "s3://delta/chk", "200 ms", &env, 20, 5);
    let watched = watcher.stop();
    let got = read("s3://delta/table", &["rows"], &env);
    eprintln!(
        "crash test (Delta, S3): {kills} SIGKILLs, {} rows checked, reader: {}",
        got.len(),
        watched
    );
    assert!(kills >= 20, "only {kills} kills");
    crate::crash::assert_same_rows(got, &expected(rows), "Delta table on S3 after SIGKILLs");
    assert_no_recommit(&txns_of(s3.objects("delta", "table/_delta_log")));
    assert_eq!(
        s3.uploads_in_progress("delta"),
        0,
        "uploads left in progress"
    );
}

/// Batch mode commits once per statement; `INSERT OVERWRITE` replaces the partitions it
/// writes (the whole table when it is not partitioned) in one Delta transaction.
#[test]
fn batch_inserts_and_overwrites_are_one_delta_commit_each() {
    if !deltalake() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (parted, flat) = (tmp.path().join("parted"), tmp.path().join("flat"));
    let ddl = format!(
        "SET 'execution.runtime-mode' = 'batch';\n\
         CREATE TABLE p (id INT, dt STRING) PARTITIONED BY (dt) \
         WITH ('connector' = 'delta', 'path' = '{}');\n\
         CREATE TABLE f (id INT, dt STRING) WITH ('connector' = 'delta', 'path' = '{}');\n",
        parted.display(),
        flat.display()
    );
    let go = |name: &str, sql: &str| {
        let script = write_script(tmp.path(), name, &format!("{ddl}{sql}"));
        run_ok(&[script.to_str().unwrap()]);
    };
    go(
        "first.sql",
        "INSERT INTO p VALUES (1, 'a'), (2, 'a'), (3, 'b');\n\
         INSERT INTO f VALUES (1, 'a'), (2, 'a'), (3, 'b');",
    );
    go(
        "second.sql",
        "INSERT OVERWRITE p VALUES (10, 'a');\nINSERT OVERWRITE f VALUES (10, 'a');",
    );
    let rows = |t: &Path| read(t.to_str().unwrap(), &["rows"], &[]);
    assert_eq!(
        rows(&parted),
        [r#"{"dt": "a", "id": 10}"#, r#"{"dt": "b", "id": 3}"#]
    );
    assert_eq!(rows(&flat), [r#"{"dt": "a", "id": 10}"#]);
    for t in [&parted, &flat] {
        let s = summary(t.to_str().unwrap(), &[]);
        assert_eq!(
            s["operations"],
            serde_json::json!(["CREATE TABLE", "WRITE", "WRITE"]),
            "{}",
            t.display()
        );
    }
}

/// A table that exists with other columns, and a query whose rows update earlier ones,
/// are refused before anything is written.
#[test]
fn mismatched_tables_and_updating_queries_are_refused() {
    if !deltalake() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let table = tmp.path().join("t");
    let create = |cols: &str, extra: &str| {
        format!(
            "SET 'execution.runtime-mode' = 'batch';\n\
             CREATE TABLE t ({cols}) WITH ('connector' = 'delta', 'path' = '{}');\n{extra}",
            table.display()
        )
    };
    let first = write_script(
        tmp.path(),
        "first.sql",
        &create("id INT, name STRING", "INSERT INTO t VALUES (1, 'x');"),
    );
    run_ok(&[first.to_str().unwrap()]);
    let other = write_script(
        tmp.path(),
        "other.sql",
        &create("id BIGINT, label STRING", "INSERT INTO t VALUES (2, 'y');"),
    );
    let out = run(&[other.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("does not match its declaration")
            && err.contains("column 'id' is integer in the table, long in the DDL")
            && err.contains("column 'label' is missing")
            && err.contains("the table has column 'name', which the DDL lacks"),
        "{err}"
    );
    let updating = write_script(
        tmp.path(),
        "updating.sql",
        &format!(
            "CREATE TABLE src (id INT) WITH ('connector' = 'datagen', 'number-of-rows' = '10');\n\
             CREATE TABLE t (id INT, name STRING) WITH ('connector' = 'delta', 'path' = '{}');\n\
             INSERT INTO t SELECT id, CAST(COUNT(*) AS STRING) FROM src GROUP BY id;",
            table.display()
        ),
    );
    let out = run(&[updating.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("Weir does not merge updates into Delta tables"),
        "{err}"
    );
    assert_eq!(
        read(table.to_str().unwrap(), &["rows"], &[]),
        [r#"{"id": 1, "name": "x"}"#]
    );
}

/// The job stops at each point of a Delta commit — files published but not yet in the log,
/// the log written but not yet acknowledged — and is restored: every row once, no
/// checkpoint committed twice.
#[test]
fn delta_sink_is_exactly_once_at_every_failpoint() {
    if !deltalake() {
        return;
    }
    let rows = 3_000;
    for point in [
        "commit-after-publish=2",
        "delta-before-commit=2",
        "delta-after-commit=2",
        "after-metadata=3",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let table = tmp.path().join("table");
        let s = script(tmp.path(), table.to_str().unwrap(), rows, 6_000);
        let chk = tmp.path().join("chk");
        let args = [
            &s[..],
            "-p",
            "2",
            "--checkpoint-dir",
            chk.to_str().unwrap(),
            "--checkpoint-interval",
            "100 ms",
            "--restore",
            "latest",
        ];
        crate::crash::crash_at(&args, point);
        run_ok(&args);
        let got = read(table.to_str().unwrap(), &["rows"], &[]);
        crate::crash::assert_same_rows(got, &expected(rows), point);
        assert_no_recommit(&txns(&table));
    }
}

/// Partition values with characters a folder name cannot hold are escaped in the folder
/// and read back as written (an empty value is NULL, as in Flink's filesystem sink).
#[test]
fn partition_values_with_special_characters_read_back() {
    if !deltalake() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let table = tmp.path().join("t");
    let script = write_script(
        tmp.path(),
        "job.sql",
        &format!(
            "SET 'execution.runtime-mode' = 'batch';\n\
             CREATE TABLE t (id INT, k STRING) PARTITIONED BY (k) \
             WITH ('connector' = 'delta', 'path' = '{}');\n\
             INSERT INTO t VALUES (1, 'a b/c'), (2, '50%'), (3, 'x=y'), (4, ''), (5, 'ü#?');",
            table.display()
        ),
    );
    run_ok(&[script.to_str().unwrap()]);
    assert_eq!(
        read(table.to_str().unwrap(), &["rows"], &[]),
        [
            r#"{"id": 1, "k": "a b/c"}"#,
            r#"{"id": 2, "k": "50%"}"#,
            r#"{"id": 3, "k": "x=y"}"#,
            r#"{"id": 4, "k": null}"#,
            r#"{"id": 5, "k": "\u00fc#?"}"#,
        ]
    );
}

/// The source reads the latest snapshot of a table delta-rs wrote (appends and a delete
/// that rewrote files), partition values from the log: in batch mode, and streaming at
/// parallelism 2 while the job is SIGKILLed and restored (each file a split, resumed
/// mid-file), into an exactly-once file sink.
#[test]
fn delta_source_reads_what_delta_rs_wrote_exactly_once_under_sigkill() {
    if !deltalake() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let table = tmp.path().join("written");
    let rows = 6_000;
    read(
        table.to_str().unwrap(),
        &["write", &rows.to_string(), "20"],
        &[],
    );
    // Every id but the multiples of 5 up to 300, as the JSON lines the file sink writes.
    let mut expected: Vec<String> = (1..=rows)
        .filter(|id| id % 5 != 0 || *id > 300)
        .map(|id| format!(r#"{{"id":{id},"name":"n{}","day":"d{}"}}"#, id * 7, id % 3))
        .collect();
    expected.sort();
    let job = |mode: &str, out: &Path| {
        format!(
            "SET 'execution.runtime-mode' = '{mode}';\n\
             CREATE TABLE t (id BIGINT, name STRING, day STRING) \
             WITH ('connector' = 'delta', 'path' = '{}');\n\
             CREATE TABLE o (id BIGINT, name STRING, day STRING) \
             WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');\n\
             INSERT INTO o SELECT * FROM t;",
            table.display(),
            out.display()
        )
    };
    let batch_out = tmp.path().join("batch");
    let script = write_script(tmp.path(), "batch.sql", &job("batch", &batch_out));
    run_ok(&[script.to_str().unwrap()]);
    crate::crash::assert_same_rows(committed_lines(&batch_out), &expected, "batch read");

    let out = tmp.path().join("streaming");
    let script = write_script(tmp.path(), "streaming.sql", &job("streaming", &out));
    let chk = tmp.path().join("chk");
    let kills = kill_checkpointed_until_done(
        script.to_str().unwrap(),
        chk.to_str().unwrap(),
        "100 ms",
        &[("WEIR_FAILPOINTS", "before-file-read=sleep:80")],
        10,
        3,
    );
    assert!(kills >= 10, "only {kills} kills");
    crate::crash::assert_same_rows(committed_lines(&out), &expected, "streaming read");
}

/// A table Weir wrote reads back with its types, NULL partition values included; a
/// table that is not there, or has other columns, is refused with its path.
#[test]
fn delta_tables_read_back_with_their_types_and_bad_tables_are_named() {
    if !deltalake() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let table = tmp.path().join("typed");
    let out = tmp.path().join("out");
    let columns = "id INT, ts TIMESTAMP(3), price DECIMAL(10, 2), ok BOOLEAN, day DATE";
    let script = write_script(
        tmp.path(),
        "roundtrip.sql",
        &format!(
            "SET 'execution.runtime-mode' = 'batch';\n\
             CREATE TABLE t ({columns}) PARTITIONED BY (day) \
             WITH ('connector' = 'delta', 'path' = '{table}');\n\
             CREATE TABLE o ({columns}) \
             WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv');\n\
             INSERT INTO t VALUES (1, TIMESTAMP '2024-01-02 03:04:05.678', 12.34, TRUE, DATE '2024-01-02'),\n\
               (2, NULL, NULL, NULL, NULL);\n\
             INSERT INTO o SELECT * FROM t;",
            table = table.display(),
            out = out.display()
        ),
    );
    run_ok(&[script.to_str().unwrap()]);
    assert_eq!(
        committed_lines(&out),
        [
            "1,\"2024-01-02 03:04:05.678\",12.34,true,2024-01-02",
            "2,,,,"
        ]
    );
    for (name, ddl, needle) in [
        (
            "missing.sql",
            format!(
                "id INT) WITH ('connector' = 'delta', 'path' = '{}'",
                tmp.path().display()
            ),
            "holds no Delta table (no '_delta_log')",
        ),
        (
            "other.sql",
            format!(
                "id BIGINT, extra STRING) WITH ('connector' = 'delta', 'path' = '{}'",
                table.display()
            ),
            "column 'id' is integer in the table, long in the DDL; column 'extra' is missing",
        ),
    ] {
        let script = write_script(
            tmp.path(),
            name,
            &format!(
                "SET 'execution.runtime-mode' = 'batch';\n\
                 CREATE TABLE s ({ddl});\n\
                 CREATE TABLE p (id INT) WITH ('connector' = 'print');\n\
                 INSERT INTO p SELECT id FROM s;"
            ),
        );
        let result = run(&[script.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&result.stderr);
        assert!(
            !result.status.success() && err.contains(needle),
            "{name}: {err}"
        );
    }
}
