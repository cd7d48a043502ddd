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
/// seen: a join keeping 3,200 rows holds some, a stateless job none.
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

/// An interval join drops rows by watermark: after the last watermark its final
/// checkpoint holds (almost) nothing, while the same join bounded by ids instead of times
/// keeps every row.
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
    let final_checkpoint_bytes = |condition: &str| -> u64 {
        let tmp = tempfile::tempdir().unwrap();
        let chk = tmp.path().join("chk");
        let script = write_script(tmp.path(), "job.sql", &sql(condition));
        run_ok(&[
            script.to_str().unwrap(),
            "-p",
            "1",
            "--checkpoint-dir",
            chk.to_str().unwrap(),
        ]);
        let job = std::fs::read_dir(&chk)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let latest = std::fs::read_dir(&job)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("chk-"))
            .max_by_key(|p| {
                p.file_name().unwrap().to_string_lossy()[4..]
                    .parse::<u64>()
                    .unwrap()
            })
            .unwrap();
        std::fs::read_dir(latest)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum()
    };
    let timed = final_checkpoint_bytes("p.pts BETWEEN o.ts AND o.ts + INTERVAL '3' SECOND");
    let untimed = final_checkpoint_bytes("p.pid - o.id BETWEEN 0 AND 150");
    assert!(
        timed * 20 < untimed,
        "time-bounded join state {timed} bytes vs {untimed} bytes without time bounds"
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
