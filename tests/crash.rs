//! Exactly-once under crashes: the real binary is SIGKILLed at random moments, or aborts
//! at armed failpoints, and restarted with `--restore latest` until it finishes. The
//! committed output must equal that of an undisturbed run: nothing lost, nothing twice.

use crate::common::*;
use std::path::Path;
use std::time::{Duration, Instant};

const JOB: &str = "
CREATE TABLE src (id BIGINT, k INT, s STRING) WITH (
  'connector' = 'datagen', 'rows-per-second' = '${rate}',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '${rows}',
  'fields.k.min' = '0', 'fields.k.max' = '99', 'fields.s.length' = '8'
);
CREATE TABLE dst (id BIGINT, k INT, s STRING) WITH (
  'connector' = 'filesystem', 'path' = '${out}', 'format' = 'json',
  'sink.rolling-policy.file-size' = '4kb'
);
INSERT INTO dst SELECT id, k * 10, UPPER(s) FROM src WHERE k <> 7;
";

pub fn script_to(dir: &Path, out: &str, rows: u64, rate: u64) -> String {
    let text = render(
        JOB,
        &[
            ("out", out),
            ("rows", &rows.to_string()),
            ("rate", &rate.to_string()),
        ],
    );
    write_script(dir, "job.sql", &text)
        .to_str()
        .unwrap()
        .to_string()
}

pub fn script(dir: &Path, rows: u64, rate: u64) -> String {
    script_to(dir, dir.join("out").to_str().unwrap(), rows, rate)
}

pub fn expected(rows: u64) -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    let s = script(tmp.path(), rows, 1_000_000);
    run_ok(&[&s, "-p", "1"]);
    let lines = committed_lines(&tmp.path().join("out"));
    assert!(
        lines.len() as u64 > rows * 9 / 10,
        "reference run produced too few rows"
    );
    lines
}

pub fn assert_exactly_once(dir: &Path, expected: &[String], what: &str) {
    assert_same_rows(committed_lines(&dir.join("out")), expected, what);
}

pub fn assert_same_rows(got: Vec<String>, expected: &[String], what: &str) {
    let mut seen = std::collections::HashSet::new();
    let dups = got.iter().filter(|l| !seen.insert(*l)).count();
    let lost = expected.iter().filter(|l| !seen.contains(l)).count();
    assert_eq!(
        (lost, dups),
        (0, 0),
        "{what}: {lost} rows lost, {dups} rows duplicated"
    );
    assert_eq!(got, expected, "{what}: committed output differs");
}

/// [`kill_checkpointed_until_done`] for `script`, which writes to `dir/out`, with 150 ms
/// checkpoints in `dir/chk`, killed at least `kills` times: the number of kills and the
/// lines committed.
pub fn committed_after_kills(
    dir: &Path,
    script: &str,
    kills: usize,
    seed: u64,
) -> (usize, Vec<String>) {
    committed_after_kills_at(dir, script, &["2"], kills, seed)
}

/// [`committed_after_kills`], run `n` (and the restore after kill `n`) at parallelism
/// `parallelisms[n % parallelisms.len()]`.
pub fn committed_after_kills_at(
    dir: &Path,
    script: &str,
    parallelisms: &[&str],
    kills: usize,
    seed: u64,
) -> (usize, Vec<String>) {
    let chk = dir.join("chk");
    let args = [
        script,
        "--checkpoint-dir",
        chk.to_str().unwrap(),
        "--checkpoint-interval",
        "150 ms",
    ];
    let done = kill_until_done_at(&args, parallelisms, &[], kills, seed);
    assert!(done >= kills, "only {done} kills");
    (done, committed_lines(&dir.join("out")))
}

/// [`kill_until_done`] for `script` at parallelism 2 with checkpoints in `chk` every
/// `interval`.
pub fn kill_checkpointed_until_done(
    script: &str,
    chk: &str,
    interval: &str,
    env: &[(&str, &str)],
    kills: usize,
    seed: u64,
) -> usize {
    let args = [
        script,
        "-p",
        "2",
        "--checkpoint-dir",
        chk,
        "--checkpoint-interval",
        interval,
    ];
    kill_until_done(&args, env, kills, seed)
}

/// Starts the job (always with `--restore latest`), SIGKILLs it at random moments until
/// `kills` kills happened, then lets it finish. Returns the number of kills.
pub fn kill_until_done(args: &[&str], env: &[(&str, &str)], kills: usize, seed: u64) -> usize {
    kill_until_done_at(args, &[], env, kills, seed)
}

/// [`kill_until_done`], run `n` with `-p parallelisms[n % parallelisms.len()]` added to
/// `args` (none: as `args` say).
pub fn kill_until_done_at(
    args: &[&str],
    parallelisms: &[&str],
    env: &[(&str, &str)],
    kills: usize,
    seed: u64,
) -> usize {
    let mut rng = Lcg(seed);
    let mut done = 0;
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "job did not finish"
        );
        let mut full: Vec<&str> = args.to_vec();
        full.extend(["--restore", "latest"]);
        if !parallelisms.is_empty() {
            full.extend(["-p", parallelisms[done % parallelisms.len()]]);
        }
        let mut child = spawn(&full, env);
        let wait = if done < kills {
            Duration::from_millis(150 + rng.next(600))
        } else {
            Duration::from_secs(240)
        };
        let t = Instant::now();
        let mut status = None;
        while t.elapsed() < wait {
            if let Some(st) = child.try_wait().unwrap() {
                status = Some(st);
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        match status {
            Some(st) => {
                child.wait().unwrap();
                assert!(
                    st.success(),
                    "restarted job failed: {}",
                    crate::common::stderr_of(&mut child)
                );
                return done;
            }
            None => {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                done += 1;
            }
        }
    }
}

#[test]
fn file_sink_is_exactly_once_under_sigkill() {
    let rows = 40_000;
    let expected = expected(rows);
    let tmp = tempfile::tempdir().unwrap();
    let s = script(tmp.path(), rows, 2500);
    let chk = tmp.path().join("chk");
    let kills = kill_checkpointed_until_done(&s[..], chk.to_str().unwrap(), "150 ms", &[], 30, 42);
    eprintln!(
        "crash test (local files): {kills} SIGKILLs, {} rows checked, 0 lost, 0 duplicated",
        expected.len()
    );
    assert!(
        kills >= 30,
        "only {kills} kills: the job ran too fast to be interrupted"
    );
    assert_exactly_once(tmp.path(), &expected, "after SIGKILLs");
}

/// A streaming `LIMIT` keeps its row count in checkpoints: killed and restored, the job
/// commits exactly `fetch` distinct rows (a limit that forgot its count after a restore
/// would pass on more).
#[test]
fn streaming_limit_is_exactly_once_under_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let sql = format!(
        "CREATE TABLE src (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '4000', \
         'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '16000');\n\
         CREATE TABLE dst (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
         INSERT INTO dst SELECT id FROM src WHERE id % 3 <> 0 LIMIT 3000 OFFSET 100;",
        out.display()
    );
    let s = write_script(tmp.path(), "job.sql", &sql);
    let chk = tmp.path().join("chk");
    let kills = kill_checkpointed_until_done(
        s.to_str().unwrap(),
        chk.to_str().unwrap(),
        "100 ms",
        &[],
        5,
        7,
    );
    assert!(kills >= 5, "only {kills} kills: the job ran too fast");
    let mut ids = committed_numbers(&out);
    let total = ids.len();
    ids.dedup();
    assert_eq!(
        (total, ids.len()),
        (3000, 3000),
        "after {kills} kills: {total} rows committed, {} distinct",
        ids.len()
    );
    assert!(ids.iter().all(|i| i % 3 != 0 && *i <= 16000));
}

/// Runs the job with the failpoint `point` armed and checks that it stopped there.
pub fn crash_at(args: &[&str], point: &str) {
    let crashed = spawn(args, &[("WEIR_FAILPOINTS", point)])
        .wait_with_output()
        .unwrap();
    assert!(
        !crashed.status.success(),
        "{point}: the failpoint was never reached"
    );
    assert!(
        String::from_utf8_lossy(&crashed.stderr).contains("failpoint"),
        "{point}: the job failed for another reason: {}",
        String::from_utf8_lossy(&crashed.stderr)
    );
}

#[test]
fn file_sink_is_exactly_once_at_every_failpoint() {
    let rows = 4000;
    let expected = expected(rows);
    for point in [
        "after-pending-upload=3",
        "after-task-state=5",
        "after-metadata=2",
        "commit-before-publish=3",
        "commit-after-publish=2",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let s = script(tmp.path(), rows, 5000);
        let chk = tmp.path().join("chk");
        let c = chk.to_str().unwrap();
        let args = [
            &s[..],
            "-p",
            "2",
            "--checkpoint-dir",
            c,
            "--checkpoint-interval",
            "100 ms",
            "--restore",
            "latest",
        ];
        crash_at(&args, point);
        let restored = has_checkpoint(&chk);
        // A crash in the middle of a local write leaves the object store's staging file
        // (`<part>#<n>`) beside a part: make sure there is one to clean up.
        for e in std::fs::read_dir(tmp.path().join("out")).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with(".part-") && name.ends_with(".pending") {
                std::fs::write(e.path().with_file_name(format!("{name}#7")), "partial").unwrap();
            }
        }
        run_ok(&args);
        assert_exactly_once(tmp.path(), &expected, point);
        if !restored {
            // Crashed before its first checkpoint: the rerun started afresh, and hidden
            // parts of the crashed attempt may stay (invisible to readers).
            continue;
        }
        let leftovers: Vec<_> = std::fs::read_dir(tmp.path().join("out"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(
            leftovers.is_empty(),
            "{point}: uncommitted parts left behind: {leftovers:?}"
        );
    }
}

/// Two INSERTs write into one folder: after a crash each sink re-commits its own pending
/// parts and cleans up only its own leftovers (one sink once removed the other's pending
/// part before that part was re-committed, losing its rows).
#[test]
fn two_sinks_into_one_folder_are_exactly_once_at_failpoints() {
    let rows = 4000;
    let expected = expected(rows);
    for point in [
        "after-metadata=2",
        "commit-before-publish=2",
        "after-task-state=6",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let one = std::fs::read_to_string(script(tmp.path(), rows, 5000)).unwrap();
        let single = "INSERT INTO dst SELECT id, k * 10, UPPER(s) FROM src WHERE k <> 7;";
        assert!(one.contains(single));
        let two = one.replace(
            single,
            "INSERT INTO dst SELECT id, k * 10, UPPER(s) FROM src WHERE k <> 7 AND k < 50;\n\
             INSERT INTO dst SELECT id, k * 10, UPPER(s) FROM src WHERE k <> 7 AND k >= 50;",
        );
        let s = write_script(tmp.path(), "two.sql", &two);
        let chk = tmp.path().join("chk");
        let args = [
            s.to_str().unwrap(),
            "-p",
            "2",
            "--checkpoint-dir",
            chk.to_str().unwrap(),
            "--checkpoint-interval",
            "100 ms",
            "--restore",
            "latest",
        ];
        crash_at(&args, point);
        let pending = std::fs::read_dir(tmp.path().join("out"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".pending"))
            .count();
        run_ok(&args);
        assert_exactly_once(
            tmp.path(),
            &expected,
            &format!("two sinks, {point} ({pending} pending parts at the crash)"),
        );
    }
}

#[test]
fn ctrl_c_during_checkpoints_leaves_only_whole_committed_files() {
    let tmp = tempfile::tempdir().unwrap();
    let s = script(tmp.path(), 200_000, 20_000);
    let chk = tmp.path().join("chk");
    let child = spawn(
        &[
            &s,
            "-p",
            "2",
            "--checkpoint-dir",
            chk.to_str().unwrap(),
            "--checkpoint-interval",
            "20 ms",
        ],
        &[],
    );
    std::thread::sleep(Duration::from_millis(800));
    let pid = child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = committed_lines(&tmp.path().join("out"));
    assert!(!lines.is_empty(), "nothing was committed before Ctrl-C");
    let mut ids = std::collections::HashSet::new();
    for l in &lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("partial row '{l}': {e}"));
        assert!(
            ids.insert(v["id"].as_i64().unwrap()),
            "row committed twice: {l}"
        );
    }
}

/// A changelog source (`debezium-json` files: inserts, updates, deletes) into changelog
/// sinks (`debezium-json` and `canal-json`), crashed at failpoints of checkpointing and committing and restored:
/// the committed changes are those of an undisturbed run, none lost, none twice.
#[test]
fn changelog_source_is_exactly_once_at_failpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir(&input).unwrap();
    for f in 0..40 {
        let mut text = String::new();
        for i in 0..50 {
            let id = f * 1000 + i;
            let row = |v: i64| format!("{{\"id\": {id}, \"v\": {v}}}");
            text.push_str(&format!(
                "{{\"before\": null, \"after\": {}, \"op\": \"c\"}}\n",
                row(i)
            ));
            if i % 3 == 0 {
                text.push_str(&format!(
                    "{{\"before\": {}, \"after\": {}, \"op\": \"u\"}}\n",
                    row(i),
                    row(i + 100)
                ));
            }
            if i % 5 == 0 {
                let last = if i % 3 == 0 { i + 100 } else { i };
                text.push_str(&format!(
                    "{{\"before\": {}, \"after\": null, \"op\": \"d\"}}\n",
                    row(last)
                ));
            }
        }
        std::fs::write(input.join(format!("f{f:02}.json")), text).unwrap();
    }
    let job = |out: &Path| {
        format!(
            "CREATE TABLE src (id BIGINT, v BIGINT) WITH ('connector' = 'filesystem', \
             'path' = '{}', 'format' = 'debezium-json');\n\
             CREATE TABLE dst (id BIGINT, v BIGINT) WITH ('connector' = 'filesystem', \
             'path' = '{}', 'format' = 'debezium-json');\n\
             CREATE TABLE canal (id BIGINT, v BIGINT) WITH ('connector' = 'filesystem', \
             'path' = '{}', 'format' = 'canal-json');\n\
             INSERT INTO dst SELECT id, v * 2 FROM src WHERE v <> 7;\n\
             INSERT INTO canal SELECT id, v FROM src WHERE v <> 7;",
            input.display(),
            out.display(),
            out.with_extension("canal").display()
        )
    };
    let reference = tmp.path().join("reference");
    let s = write_script(tmp.path(), "reference.sql", &job(&reference));
    run_ok(&[s.to_str().unwrap(), "-p", "1"]);
    let mut expected = committed_lines(&reference);
    expected.sort();
    assert!(expected.iter().any(|l| l.contains("\"op\":\"d\"")));
    let mut expected_canal = committed_lines(&reference.with_extension("canal"));
    expected_canal.sort();
    assert!(
        expected_canal
            .iter()
            .any(|l| l.contains("\"type\":\"DELETE\""))
    );
    for point in [
        "after-task-state=3",
        "after-metadata=1",
        "commit-before-publish=1",
    ] {
        let run = tempfile::tempdir().unwrap();
        let out = run.path().join("out");
        let s = write_script(run.path(), "job.sql", &job(&out));
        let chk = run.path().join("chk");
        let args = [
            s.to_str().unwrap(),
            "-p",
            "2",
            "--checkpoint-dir",
            chk.to_str().unwrap(),
            "--checkpoint-interval",
            "20 ms",
            "--restore",
            "latest",
        ];
        // 40 files at 10 ms each keep the job running past several checkpoints.
        let slow = format!("{point},before-file-read=sleep:10");
        crash_at(&args, &slow);
        run_ok(&args);
        let mut got = committed_lines(&out);
        got.sort();
        assert_same_rows(got, &expected, point);
        let mut got = committed_lines(&out.with_extension("canal"));
        got.sort();
        assert_same_rows(got, &expected_canal, point);
    }
}

/// Window Top-N (over a window aggregate) and keep-first deduplication on a rowtime, which
/// keep rows until the watermark makes them final and emit them append-only, killed and
/// restored at another parallelism: the committed rows are those of an undisturbed run.
#[test]
fn window_top_n_and_rowtime_dedup_are_exactly_once_under_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    // Event time advances 1 s per 2000 rows: both runs generate at that rate.
    let job = |out: &Path| {
        format!(
            "CREATE TABLE src (id BIGINT, k INT, ts TIMESTAMP(3), \
               WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ('connector' = 'datagen', \
             'rows-per-second' = '2000', 'fields.id.kind' = 'sequence', \
             'fields.id.start' = '1', 'fields.id.end' = '12000', 'fields.k.min' = '0', \
             'fields.k.max' = '9');\n\
             CREATE TABLE top (window_start TIMESTAMP(3), k INT, n BIGINT, rn BIGINT) WITH \
             ('connector' = 'filesystem', 'path' = '{top}', 'format' = 'csv');\n\
             CREATE TABLE first (k INT, id BIGINT, ts TIMESTAMP(3)) WITH \
             ('connector' = 'filesystem', 'path' = '{first}', 'format' = 'csv');\n\
             INSERT INTO top SELECT window_start, k, n, rn FROM (\
               SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end \
                                            ORDER BY n DESC, k) AS rn FROM (\
                 SELECT window_start, window_end, k, COUNT(*) AS n \
                 FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(ts), INTERVAL '1' SECOND)) \
                 GROUP BY window_start, window_end, k)) WHERE rn <= 3;\n\
             INSERT INTO first SELECT k, id, ts FROM (\
               SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts) AS rn FROM src) \
             WHERE rn = 1;",
            top = out.join("top").display(),
            first = out.join("first").display()
        )
    };
    let reference = tmp.path().join("reference");
    let s = write_script(tmp.path(), "reference.sql", &job(&reference));
    run_ok(&[s.to_str().unwrap(), "-p", "1"]);
    let lines = |dir: &Path| {
        let mut l = committed_lines(&dir.join("top"));
        l.extend(committed_lines(&dir.join("first")));
        l.sort();
        l
    };
    let expected = lines(&reference);
    assert_eq!(committed_lines(&reference.join("first")).len(), 10);
    assert!(committed_lines(&reference.join("top")).len() >= 3 * 5);

    let out = tmp.path().join("out");
    let s = write_script(tmp.path(), "job.sql", &job(&out));
    let chk = tmp.path().join("chk");
    let args = |p: &'static str| {
        vec![
            s.to_str().unwrap().to_string(),
            "-p".into(),
            p.into(),
            "--checkpoint-dir".into(),
            chk.to_str().unwrap().to_string(),
            "--checkpoint-interval".into(),
            "100 ms".into(),
            "--restore".into(),
            "latest".into(),
        ]
    };
    // Killed while running at parallelism 2, 3, 1, 2, 3, 1 (each restore redistributes
    // the waiting windows and the emitted keys), then run to the end at 2.
    for (round, p) in ["2", "3", "1", "2", "3", "1"].into_iter().enumerate() {
        let a = args(p);
        let mut child = spawn(&a.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
        std::thread::sleep(Duration::from_millis(500 + 150 * round as u64));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the job finished before kill {round}"
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let a = args("2");
    run_ok(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_same_rows(
        lines(&out),
        &expected,
        "after 6 SIGKILLs at parallelism 2, 3 and 1",
    );
}
