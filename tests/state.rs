//! State TTL (`table.exec.state.ttl`): join rows and aggregate groups untouched for the
//! TTL are dropped. Customers all arrive in the first milliseconds, orders over three
//! seconds: without a TTL every order finds its customer; with a 500 ms TTL only the
//! early ones do, and per-customer counts restart after a long enough pause.

use crate::common::*;

const SQL: &str = "
SET 'table.exec.state.ttl' = '${ttl}';
CREATE TABLE customers (cid BIGINT, region INT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '100000',
  'fields.cid.kind' = 'sequence', 'fields.cid.start' = '1', 'fields.cid.end' = '200',
  'fields.region.min' = '0', 'fields.region.max' = '4'
);
CREATE TABLE orders (id BIGINT, customer BIGINT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '3000',
  'fields.customer.min' = '1', 'fields.customer.max' = '200'
);
CREATE TABLE joined (id BIGINT, region INT)
WITH ('connector' = 'filesystem', 'path' = '${out}/joined', 'format' = 'json');
CREATE TABLE counts (customer BIGINT, n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/counts', 'format' = 'debezium-json');
INSERT INTO joined SELECT o.id, c.region FROM orders o JOIN customers c ON o.customer = c.cid;
INSERT INTO counts SELECT customer, COUNT(*) FROM orders GROUP BY customer;
";

/// (joined rows, rows of the materialized counts, customers among them). An expired
/// group is forgotten without a retraction, so a customer whose count restarted appears
/// twice in the changelog's final table.
fn run_with_ttl(ttl: &str) -> (usize, usize, usize) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let script = write_script(
        tmp.path(),
        "ttl.sql",
        &render(SQL, &[("ttl", ttl), ("out", out.to_str().unwrap())]),
    );
    run_ok(&[script.to_str().unwrap(), "-p", "1"]);
    let lines = materialize(committed_lines(&out));
    let joined = lines.iter().filter(|l| l.starts_with("joined/")).count();
    let customers: Vec<i64> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("counts/ "))
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["customer"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let mut distinct = customers.clone();
    distinct.sort();
    distinct.dedup();
    (joined, customers.len(), distinct.len())
}

#[test]
fn state_ttl_drops_join_rows_and_groups_untouched_for_that_long() {
    let (joined, rows, customers) = run_with_ttl("0 ms");
    assert_eq!(joined, 3000, "without a TTL every order finds its customer");
    assert_eq!(rows, customers, "without a TTL each customer has one count");
    let (joined, rows, customers) = run_with_ttl("500 ms");
    assert!(
        joined > 0 && joined < 1500,
        "with a 500 ms TTL only orders of the first second find their customer: {joined}"
    );
    assert!(
        rows > customers,
        "with a 500 ms TTL some customers' counts restart after a pause ({rows} rows, {customers} customers)"
    );
}

/// Operators report the state they hold at each snapshot; the summary line shows the most
/// seen: a join keeping 3,200 rows holds some while it runs (checkpoints every 200 ms; a
/// finished join keeps nothing), a stateless job none.
#[test]
fn operator_state_is_reported() {
    let summary = |sql: &str| {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let script = write_script(
            tmp.path(),
            "job.sql",
            &render(sql, &[("ttl", "0 ms"), ("out", out.to_str().unwrap())]),
        );
        let output = weir()
            .args(["run", script.to_str().unwrap(), "-p", "1"])
            .args(["--checkpoint-interval", "200 ms"])
            .output()
            .unwrap();
        assert!(output.status.success());
        String::from_utf8_lossy(&output.stderr).to_string()
    };
    let stateful = summary(SQL);
    let mb: f64 = stateful
        .split("operator state up to ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no state reported: {stateful}"));
    assert!(mb > 0.0, "{stateful}");
    let stateless = summary(
        "CREATE TABLE ev (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '100');
         CREATE TABLE bh (id BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO bh SELECT id FROM ev WHERE id > 0;",
    );
    assert!(!stateless.contains("operator state"), "{stateless}");
}

/// An interval join drops rows by watermark: its checkpoints hold (almost) nothing beyond
/// the rows of the last few seconds of event time, while the same join bounded by ids
/// instead of times keeps every row. Once both inputs end, a join keeps nothing: its final
/// checkpoint holds no rows either way.
#[test]
fn interval_join_state_is_cleaned_by_the_watermark() {
    let sql = |condition: &str| {
        format!(
            "CREATE TABLE orders (id BIGINT, k AS id % 100, ts AS TO_TIMESTAMP_LTZ(id * 20, 3),
               WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
             WITH ('connector' = 'datagen', 'rows-per-second' = '20000',
               'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '20000');
             CREATE TABLE payments (pid BIGINT, k AS pid % 100, pts AS TO_TIMESTAMP_LTZ(pid * 20, 3),
               WATERMARK FOR pts AS pts - INTERVAL '1' SECOND)
             WITH ('connector' = 'datagen', 'rows-per-second' = '20000',
               'fields.pid.kind' = 'sequence', 'fields.pid.start' = '1', 'fields.pid.end' = '20000');
             CREATE TABLE paid (id BIGINT, pid BIGINT) WITH ('connector' = 'blackhole');
             INSERT INTO paid SELECT o.id, p.pid FROM orders o JOIN payments p
               ON o.k = p.k AND {condition};"
        )
    };
    // (the most state any checkpoint held, the state of the last one)
    let checkpointed = |condition: &str| -> (u64, u64) {
        let tmp = tempfile::tempdir().unwrap();
        let chk = tmp.path().join("chk");
        let script = write_script(tmp.path(), "job.sql", &sql(condition));
        let out = weir()
            .env("WEIR_LOG", "info")
            .args(["run", "--quiet", script.to_str().unwrap(), "-p", "1"])
            .arg("--checkpoint-dir")
            .arg(&chk)
            .args(["--checkpoint-interval", "100 ms"])
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{log}");
        let sizes = checkpoint_sizes(&log);
        assert!(sizes.len() >= 3, "too few checkpoints: {log}");
        let most = sizes.iter().map(|(state, _)| *state).max().unwrap();
        (most, sizes.last().unwrap().0)
    };
    let (timed, timed_last) = checkpointed("p.pts BETWEEN o.ts AND o.ts + INTERVAL '3' SECOND");
    let (untimed, untimed_last) = checkpointed("p.pid - o.id BETWEEN 0 AND 150");
    // (The time-bounded join's checkpoints are mostly Arrow IPC framing: a part per key
    // group of each side.)
    assert!(
        timed * 5 < untimed,
        "time-bounded join state {timed} bytes vs {untimed} bytes without time bounds"
    );
    // The final checkpoints hold no join rows (what is left is the sources' positions).
    assert!(
        timed_last < 4096 && untimed_last < 4096,
        "final checkpoints of {timed_last} and {untimed_last} bytes"
    );
}

/// Checkpoints past `num-retained` are deleted whole: their folders go too.
#[test]
fn only_retained_checkpoints_stay_on_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let script = crate::crash::script_to(tmp.path(), out.to_str().unwrap(), 3000, 5000);
    let chk = tmp.path().join("chk");
    run_ok(&[
        &script,
        "-p",
        "2",
        "--checkpoint-dir",
        chk.to_str().unwrap(),
        "--checkpoint-interval",
        "50 ms",
    ]);
    let names = |dir: &std::path::Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect()
    };
    let jobs = names(&chk);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let checkpoints = names(&chk.join(&jobs[0]));
    assert_eq!(
        checkpoints.len(),
        1,
        "checkpoint folders left: {checkpoints:?}"
    );
}

/// A task writes its snapshots off its data path: while a checkpoint's state file takes
/// 3 s to write (a slow store, made so by a failpoint), the source goes on emitting. A
/// task that waited for its write would print about 300 of the 3,000 rows before the
/// first checkpoint completes.
#[test]
fn rows_flow_while_a_checkpoint_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let script = write_script(
        tmp.path(),
        "job.sql",
        "
CREATE TABLE src (id BIGINT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '3000'
);
CREATE TABLE out (id BIGINT) WITH ('connector' = 'print', 'standard-error' = 'true');
INSERT INTO out SELECT id FROM src;
",
    );
    let out = weir()
        .env("WEIR_FAILPOINTS", "before-task-state=sleep:3000")
        .env("WEIR_LOG", "info")
        .args(["run", "--quiet"])
        .arg(&script)
        .args(["-p", "1", "--checkpoint-dir"])
        .arg(tmp.path().join("chk"))
        .args(["--checkpoint-interval", "300 ms"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    let first = lines
        .iter()
        .position(|l| l.contains("checkpoint 1 complete"))
        .unwrap_or_else(|| panic!("no checkpoint completed:\n{stderr}"));
    let rows_before = lines[..first]
        .iter()
        .filter(|l| l.starts_with("+I["))
        .count();
    let rows = lines.iter().filter(|l| l.starts_with("+I[")).count();
    assert_eq!(rows, 3000);
    assert!(
        rows_before >= 1500,
        "only {rows_before} rows before the first checkpoint's slow write completed"
    );
}

/// A regular join whose dimension side (40,000 rows, ~7 MB of state) is read at once and
/// never changes, while events trickle in: incremental checkpoints write the dimension's
/// key groups once and then only what the events change.
/// 40,000 dimension rows (160-character names) read at once, and `${events}` events
/// that trickle in at `${rate}` a second, each referring to a random dimension row.
const DIMENSION_TABLES: &str = "
CREATE TABLE dim (id BIGINT, name STRING) WITH (
  'connector' = 'datagen', 'rows-per-second' = '400000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '40000',
  'fields.name.length' = '160'
);
CREATE TABLE events (eid BIGINT, ref BIGINT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '${rate}',
  'fields.eid.kind' = 'sequence', 'fields.eid.start' = '1', 'fields.eid.end' = '${events}',
  'fields.ref.min' = '1', 'fields.ref.max' = '40000'
);
";

const DIMENSION_JOIN: &str = "
CREATE TABLE out (eid BIGINT, name STRING) WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'csv');
INSERT INTO out SELECT e.eid, d.name FROM events e JOIN dim d ON e.ref = d.id;
";

fn dimension_join(dir: &std::path::Path, events: u64, rate: u64) -> String {
    dimension_join_after(dir, "", events, rate)
}

/// The dimension join script in `dir`, writing to `dir/out`, after `settings` (`SET`
/// statements).
pub(crate) fn dimension_join_after(
    dir: &std::path::Path,
    settings: &str,
    events: u64,
    rate: u64,
) -> String {
    dimension_job(dir, settings, DIMENSION_JOIN, events, rate)
}

/// A job in `dir` over the dimension and event tables ([`DIMENSION_TABLES`]): `settings`
/// (`SET` statements), the tables, then `query`, whose `${out}` is `dir/out`.
pub(crate) fn dimension_job(
    dir: &std::path::Path,
    settings: &str,
    query: &str,
    events: u64,
    rate: u64,
) -> String {
    let out = dir.join("out");
    let text = settings.to_string()
        + &render(
            &(DIMENSION_TABLES.to_string() + query),
            &[
                ("out", out.to_str().unwrap()),
                ("events", &events.to_string()),
                ("rate", &rate.to_string()),
            ],
        );
    write_script(dir, "job.sql", &text)
        .to_str()
        .unwrap()
        .to_string()
}

/// Runs `script` at parallelism 2 with checkpoints in `chk` every `interval` (and the
/// `extra` arguments), logging at info level; it must succeed. Returns the log.
pub(crate) fn run_checkpointed(
    script: &str,
    chk: &std::path::Path,
    interval: &str,
    extra: &[&str],
) -> String {
    let out = weir()
        .env("WEIR_LOG", "info")
        .args(["run", "--quiet", script, "-p", "2", "--checkpoint-dir"])
        .arg(chk)
        .args(["--checkpoint-interval", interval])
        .args(extra)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{log}");
    log
}

/// (bytes of state, bytes written) of every completed checkpoint in an info log.
pub(crate) fn checkpoint_sizes(log: &str) -> Vec<(u64, u64)> {
    log.lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once(" ms (")?;
            let (state, rest) = rest.split_once(" bytes of state, ")?;
            let (written, _) = rest.split_once(" written)")?;
            Some((state.parse().ok()?, written.parse().ok()?))
        })
        .collect()
}

/// Incremental checkpoints write the unchanged dimension state once; turned off, every
/// checkpoint writes all of it. Either way the output is the same, and once the job ends
/// the shared folder holds exactly the objects the retained checkpoint refers to.
#[test]
fn incremental_checkpoints_write_only_changed_key_groups() {
    let run = |incremental: bool| {
        let tmp = tempfile::tempdir().unwrap();
        let script = dimension_join(tmp.path(), 1500, 500);
        let chk = tmp.path().join("chk");
        let incremental = format!("execution.checkpointing.incremental={incremental}");
        let log = run_checkpointed(&script, &chk, "200 ms", &["-D", &incremental]);
        assert_eq!(
            committed_numbers(&tmp.path().join("out")),
            (1..=1500).collect::<Vec<_>>()
        );
        // The shared objects left are those of the retained checkpoint.
        let job = std::fs::read_dir(&chk)
            .unwrap()
            .flatten()
            .find(|e| e.file_type().unwrap().is_dir())
            .unwrap()
            .path();
        let mut left: Vec<String> = std::fs::read_dir(job.join("shared"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().to_string())
                    .collect()
            })
            .unwrap_or_default();
        left.sort();
        let mut referenced: Vec<String> = Vec::new();
        for chk in std::fs::read_dir(&job).unwrap().flatten() {
            let meta = chk.path().join("_metadata");
            if let Ok(text) = std::fs::read_to_string(meta) {
                let meta: serde_json::Value = serde_json::from_str(&text).unwrap();
                for v in meta["vertices"].as_array().unwrap() {
                    for s in v["subtasks"].as_array().unwrap() {
                        // `name@object:offset`: a payload in one of the task's objects.
                        for r in s["shared"].as_array().into_iter().flatten() {
                            let r = r.as_str().unwrap();
                            let (_, at) = r.split_once('@').expect("a packed reference");
                            let (object, _) = at.rsplit_once(':').unwrap();
                            referenced.push(object.to_string());
                        }
                    }
                }
            }
        }
        referenced.sort();
        referenced.dedup();
        assert_eq!(left, referenced, "shared objects left behind or missing");
        checkpoint_sizes(&log)
    };
    // Checkpoints taken once the whole dimension is in state (the state then only grows
    // by the events' few kilobytes).
    assert_checkpoints_write_the_change(settled(run(true)), settled(run(false)), 10);
}

/// The checkpoints among `sizes` (state, written) taken once the state stopped growing
/// (within 5% of its largest), but the first of them, which may have written the last
/// of the growth.
fn settled(sizes: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    let most = sizes.iter().map(|(s, _)| *s).max().unwrap_or(0);
    let mut settled: Vec<(u64, u64)> = sizes
        .into_iter()
        .filter(|(s, _)| *s * 20 >= most * 19)
        .collect();
    if !settled.is_empty() {
        settled.remove(0);
    }
    settled
}

/// Settled checkpoints with incremental checkpoints (`delta`) each write less than
/// 1/`parts` of their state; without (`full`), all of it.
fn assert_checkpoints_write_the_change(delta: Vec<(u64, u64)>, full: Vec<(u64, u64)>, parts: u64) {
    eprintln!("checkpoints (state, written): incremental {delta:?}; whole {full:?}");
    assert!(delta.len() >= 4 && full.len() >= 4, "{delta:?} / {full:?}");
    assert!(
        full.iter().all(|(state, written)| written == state),
        "{full:?}"
    );
    assert!(
        delta
            .iter()
            .all(|(state, written)| written * parts < *state),
        "incremental checkpoints wrote most of their state again: {delta:?}"
    );
}

/// The dimension join under SIGKILLs, restored each time from the latest incremental
/// checkpoint (state files referring to shared objects of earlier checkpoints and of
/// earlier runs): every event is joined exactly once.
#[test]
fn incremental_checkpoints_are_exactly_once_under_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let script = dimension_join(tmp.path(), 4000, 800);
    let chk = tmp.path().join("chk");
    let (kills, _) = crate::crash::committed_after_kills(tmp.path(), &script, 12, 7);
    // Killed runs left incremental checkpoints behind, which the next runs restored.
    let runs_with_shared_state = std::fs::read_dir(&chk)
        .unwrap()
        .flatten()
        .filter(|job| {
            std::fs::read_dir(job.path().join("shared")).is_ok_and(|mut d| d.next().is_some())
        })
        .count();
    assert!(
        runs_with_shared_state >= 3,
        "only {runs_with_shared_state} runs wrote shared state"
    );
    assert_eq!(
        committed_numbers(&tmp.path().join("out")),
        (1..=4000).collect::<Vec<_>>(),
        "events lost or joined twice after {kills} SIGKILLs"
    );
}

/// Jobs whose keyed state mostly falls idle: the first `${cold}` rows make a key each,
/// the rest change only 40 of them, 20 at a time: keys 0–19 for 10,000 rows, then keys
/// 20–39, and so on. (So keys sit idle in several parts of their key groups when a job
/// is restored, and change again afterwards.) `${query}` reads `keyed`, `(k, seq)`.
const HOT_KEYS: &str = "
CREATE TABLE src (seq BIGINT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '${rate}',
  'fields.seq.kind' = 'sequence', 'fields.seq.start' = '0', 'fields.seq.end' = '${last}'
);
CREATE VIEW keyed AS
  SELECT CASE WHEN seq < ${cold} THEN seq ELSE seq % 20 + 20 * (seq / 10000 % 2) END AS k, seq
  FROM src;
${query}
";

/// An updating aggregate over the hot keys.
const HOT_AGGREGATE: &str = "
CREATE TABLE out (k BIGINT, n BIGINT, total BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'debezium-json');
INSERT INTO out SELECT k, COUNT(*), SUM(seq) FROM keyed GROUP BY k;
";

/// The same with `COUNT(DISTINCT …)`, which the row-at-a-time aggregate runs.
const HOT_DISTINCT: &str = "
CREATE TABLE out (k BIGINT, d BIGINT, total BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'debezium-json');
INSERT INTO out SELECT k, COUNT(DISTINCT seq % 7), SUM(seq) FROM keyed GROUP BY k;
";

/// A Top-3 per hot key, by a score that a new row beats now and then (distinct for
/// every row, so there are no ties).
const HOT_TOP_N: &str = "
CREATE TABLE out (k BIGINT, seq BIGINT, rn BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'debezium-json');
INSERT INTO out
SELECT k, seq, rn FROM (
  SELECT k, seq, ROW_NUMBER() OVER (PARTITION BY k ORDER BY score DESC) AS rn
  FROM (SELECT k, seq, seq * 7919 % 1000003 AS score FROM keyed)
) WHERE rn <= 3;
";

/// The sequence numbers of a hot-keys job: those below `cold` make a key each, the rest
/// up to `last` change the 40 hot keys.
#[derive(Clone, Copy)]
struct Hot {
    cold: i64,
    last: i64,
}

/// A state of 100,000 keys, large beside what stays inline in a state file.
const SIZED: Hot = Hot {
    cold: 100_000,
    last: 199_999,
};

/// Mostly hot keys, so that restores mostly find them in several parts.
const MOSTLY_HOT: Hot = Hot {
    cold: 20_000,
    last: 149_999,
};

/// The hot-keys job `query` in `dir` over the sequence numbers of `hot`, writing to
/// `dir/out`.
fn hot_keys(dir: &std::path::Path, query: &str, hot: Hot, rate: u64) -> String {
    let text = render(
        &HOT_KEYS.replace("${query}", query),
        &[
            ("out", dir.join("out").to_str().unwrap()),
            ("cold", &hot.cold.to_string()),
            ("last", &hot.last.to_string()),
            ("rate", &rate.to_string()),
        ],
    );
    write_script(dir, "job.sql", &text)
        .to_str()
        .unwrap()
        .to_string()
}

/// The sequence numbers of `hot`, by key.
fn hot_keys_of(hot: Hot) -> std::collections::BTreeMap<i64, Vec<i64>> {
    let mut keys: std::collections::BTreeMap<i64, Vec<i64>> = Default::default();
    for seq in 0..=hot.last {
        let k = if seq < hot.cold {
            seq
        } else {
            seq % 20 + 20 * (seq / 10_000 % 2)
        };
        keys.entry(k).or_default().push(seq);
    }
    keys
}

/// The final rows of a hot-keys job over `hot`, sorted, as `materialize` shows them:
/// `rows_of` gives each key's rows from its sequence numbers.
fn hot_result(hot: Hot, rows_of: impl Fn(i64, &[i64]) -> Vec<String>) -> Vec<String> {
    let mut rows: Vec<String> = hot_keys_of(hot)
        .iter()
        .flat_map(|(k, seqs)| rows_of(*k, seqs))
        .collect();
    rows.sort();
    rows
}

/// The final rows of [`HOT_AGGREGATE`] over `hot`.
fn hot_aggregate_result(hot: Hot) -> Vec<String> {
    hot_result(hot, |k, seqs| {
        let (n, total) = (seqs.len(), seqs.iter().sum::<i64>());
        vec![format!("{{\"k\":{k},\"n\":{n},\"total\":{total}}}")]
    })
}

/// The final rows of [`HOT_DISTINCT`] over `hot`.
fn hot_distinct_result(hot: Hot) -> Vec<String> {
    hot_result(hot, |k, seqs| {
        let distinct: std::collections::BTreeSet<i64> = seqs.iter().map(|s| s % 7).collect();
        let total = seqs.iter().sum::<i64>();
        vec![format!(
            "{{\"k\":{k},\"d\":{},\"total\":{total}}}",
            distinct.len()
        )]
    })
}

/// The final rows of [`HOT_TOP_N`] over `hot`.
fn hot_top_n_result(hot: Hot) -> Vec<String> {
    hot_result(hot, |k, seqs| {
        let mut seqs = seqs.to_vec();
        seqs.sort_by_key(|seq| std::cmp::Reverse(seq * 7919 % 1_000_003));
        seqs.into_iter()
            .take(3)
            .enumerate()
            .map(|(r, seq)| format!("{{\"k\":{k},\"seq\":{seq},\"rn\":{}}}", r + 1))
            .collect()
    })
}

/// Runs the hot-keys job `query` over [`SIZED`] at p=2 with 200 ms checkpoints,
/// incremental or not, checks its final rows against `expected`, and returns the sizes
/// (state, written) of its checkpoints.
fn hot_keys_checkpoints(query: &str, expected: &[String], incremental: bool) -> Vec<(u64, u64)> {
    let tmp = tempfile::tempdir().unwrap();
    let script = hot_keys(tmp.path(), query, SIZED, 50_000);
    let incremental = format!("execution.checkpointing.incremental={incremental}");
    let log = run_checkpointed(
        &script,
        &tmp.path().join("chk"),
        "200 ms",
        &["-D", &incremental],
    );
    assert_eq!(
        materialize(committed_lines(&tmp.path().join("out"))),
        expected
    );
    checkpoint_sizes(&log)
}

/// Incremental checkpoints of `query` write the keys that changed since the previous
/// checkpoint: once the 100,000 keys exist and only 40 of them change, a checkpoint
/// writes a small part of the state (parts under 4 KiB stay inline in the state file and
/// are written each time: 7% of the aggregate's 3.4 MB, 9% of the Top-N's 2.6 MB).
/// Without incremental checkpoints every checkpoint writes all of it. The results are
/// the same.
fn checkpoints_only_the_changed_keys(query: &str, expected: &[String]) {
    let delta = settled(hot_keys_checkpoints(query, expected, true));
    let full = settled(hot_keys_checkpoints(query, expected, false));
    assert_checkpoints_write_the_change(delta, full, 5);
}

#[test]
fn an_updating_aggregate_checkpoints_only_the_groups_it_changed() {
    checkpoints_only_the_changed_keys(HOT_AGGREGATE, &hot_aggregate_result(SIZED));
}

#[test]
fn a_distinct_aggregate_checkpoints_only_the_groups_it_changed() {
    checkpoints_only_the_changed_keys(HOT_DISTINCT, &hot_distinct_result(SIZED));
}

#[test]
fn a_top_n_checkpoints_only_the_partitions_it_changed() {
    checkpoints_only_the_changed_keys(HOT_TOP_N, &hot_top_n_result(SIZED));
}

/// The hot-keys job `query` over [`MOSTLY_HOT`] under 8 SIGKILLs: each run restores key
/// groups written as several parts (the changes after an older part) and must end with
/// `expected`.
fn exact_after_restores_of_deltas(query: &str, expected: &[String], seed: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let script = hot_keys(tmp.path(), query, MOSTLY_HOT, 30_000);
    let (_, lines) = crate::crash::committed_after_kills(tmp.path(), &script, 8, seed);
    assert_eq!(materialize(lines), expected);
}

#[test]
fn an_updating_aggregate_restored_from_delta_checkpoints_is_exact() {
    exact_after_restores_of_deltas(HOT_AGGREGATE, &hot_aggregate_result(MOSTLY_HOT), 11);
}

#[test]
fn a_distinct_aggregate_restored_from_delta_checkpoints_is_exact() {
    exact_after_restores_of_deltas(HOT_DISTINCT, &hot_distinct_result(MOSTLY_HOT), 17);
}

#[test]
fn a_top_n_restored_from_delta_checkpoints_is_exact() {
    exact_after_restores_of_deltas(HOT_TOP_N, &hot_top_n_result(MOSTLY_HOT), 13);
}
