//! FLIP-147 end to end: a job with a bounded and an unbounded pipeline keeps running, and
//! the bounded pipeline's last rows are committed by a final checkpoint triggered as soon
//! as its tasks finish — with no periodic checkpoints configured at all.

use crate::common::*;
use std::time::{Duration, Instant};

const JOB: &str = "
CREATE TABLE bounded (id BIGINT) WITH (
  'connector' = 'datagen', 'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '500'
);
CREATE TABLE forever (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '50');
CREATE TABLE a (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '${out}/a', 'format' = 'csv');
CREATE TABLE b (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '${out}/b', 'format' = 'csv');
INSERT INTO a SELECT id FROM bounded;
INSERT INTO b SELECT id FROM forever;
";

fn start(after_finish: bool) -> (tempfile::TempDir, std::process::Child) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let s = write_script(
        tmp.path(),
        "job.sql",
        &render(JOB, &[("out", out.to_str().unwrap())]),
    );
    let flag = format!("execution.checkpointing.checkpoints-after-tasks-finish={after_finish}");
    let child = spawn(&[s.to_str().unwrap(), "-p", "2", "-D", &flag], &[]);
    (tmp, child)
}

fn ids(dir: &std::path::Path) -> Vec<String> {
    committed_lines(dir)
        .into_iter()
        .filter(|l| l != "id")
        .collect()
}

#[test]
fn bounded_branch_commits_while_the_job_keeps_running() {
    let (tmp, mut child) = start(true);
    let a = tmp.path().join("out/a");
    let started = Instant::now();
    while ids(&a).len() < 500 && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let running = child.try_wait().unwrap().is_none();
    let committed = ids(&a);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        running,
        "the unbounded pipeline should keep the job running"
    );
    let mut expected: Vec<String> = (1..=500).map(|i| i.to_string()).collect();
    expected.sort();
    assert_eq!(
        committed, expected,
        "the bounded pipeline's rows were not all committed"
    );
    eprintln!(
        "final checkpoint committed the bounded branch after {:?}",
        started.elapsed()
    );
}

#[test]
fn without_checkpoints_after_finish_the_last_rows_are_never_committed() {
    let (tmp, mut child) = start(false);
    std::thread::sleep(Duration::from_secs(2));
    let committed = ids(&tmp.path().join("out/a"));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        committed.is_empty(),
        "pre-FLIP-147 behaviour: nothing of the bounded branch commits"
    );
}
