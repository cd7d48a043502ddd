//! Batch mode: bounded queries on DataFusion's execution, including what streaming mode
//! does not run (ORDER BY), written through the two-phase-commit sinks.

use crate::common::*;

const SQL: &str = "
CREATE TABLE src (id BIGINT, k AS id % 4) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000000000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '10000'
);
CREATE TABLE totals (k BIGINT, n BIGINT, s BIGINT) WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'csv');
INSERT INTO totals SELECT k, COUNT(*), SUM(id) FROM src GROUP BY k;
";

#[test]
fn batch_aggregate_commits_the_exact_totals() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let s = write_script(
        tmp.path(),
        "job.sql",
        &render(SQL, &[("out", out.to_str().unwrap())]),
    );
    run_ok(&[s.to_str().unwrap(), "--mode", "batch"]);
    let mut expected: Vec<String> = (0..4)
        .map(|k| {
            let ids: Vec<i64> = (1..=10000).filter(|i| i % 4 == k).collect();
            format!("{k},{},{}", ids.len(), ids.iter().sum::<i64>())
        })
        .collect();
    expected.push("k,n,s".into());
    expected.sort();
    assert_eq!(committed_lines(&out), expected);
}

#[test]
fn updating_aggregate_into_an_append_only_file_is_rejected_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let s = write_script(
        tmp.path(),
        "job.sql",
        &render(SQL, &[("out", out.to_str().unwrap())]),
    );
    let result = run(&[s.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(!result.status.success());
    assert!(
        err.contains("line 7")
            && err.contains("table 'totals'")
            && err.contains("GroupAggregate")
            && err.contains("debezium-json"),
        "{err}"
    );
    assert!(committed_lines(&out).is_empty());
}

#[test]
fn batch_mode_rejects_unbounded_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let s = write_script(
        tmp.path(),
        "job.sql",
        "CREATE TABLE s (a INT) WITH ('connector' = 'datagen');\nSELECT a FROM s;",
    );
    let result = run(&[s.to_str().unwrap(), "--mode", "batch"]);
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(!result.status.success());
    assert!(err.contains("table 's' is unbounded"), "{err}");
}
