//! Restart strategies: a job whose task fails restarts by itself, in the same process,
//! from its latest completed checkpoint, and its committed output stays exactly once; a
//! failure that comes back every time (a poison record) ends the job once the strategy's
//! limits are reached.

use crate::common::*;
use crate::crash::{assert_exactly_once, expected, script};

fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

/// Failures injected into a task's checkpoint write and into the sink's commit: the job
/// restarts twice on its own and ends with every row committed exactly once.
#[test]
fn failed_tasks_restart_from_the_latest_checkpoint_exactly_once() {
    let rows = 12_000;
    let expected = expected(rows);
    let tmp = tempfile::tempdir().unwrap();
    let s = script(tmp.path(), rows, 4000);
    let chk = tmp.path().join("chk");
    let child = spawn(
        &[
            &s,
            "-p",
            "2",
            "--checkpoint-dir",
            chk.to_str().unwrap(),
            "--checkpoint-interval",
            "200 ms",
            "-D",
            "restart-strategy.type=fixed-delay",
            "-D",
            "restart-strategy.fixed-delay.attempts=3",
            "-D",
            "restart-strategy.fixed-delay.delay=100 ms",
        ],
        &[
            (
                "WEIR_FAILPOINTS",
                "after-task-state=fail:5,commit-before-publish=fail:6",
            ),
            ("WEIR_LOG", "info"),
        ],
    );
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        count(&stderr, "restarting from its latest completed checkpoint"),
        2,
        "{stderr}"
    );
    assert_eq!(count(&stderr, "injected a failure"), 2, "{stderr}");
    // A recovery is timed: failure → first record a sink took again (a failure in the
    // last commit may leave no record to take after it).
    assert!(count(&stderr, "job processing again") >= 1, "{stderr}");
    assert_exactly_once(tmp.path(), &expected, "after two in-process restarts");
}

/// A record that cannot be read fails every attempt: the strategy's limit ends the job
/// with the record's error, and what was committed before stays.
#[test]
fn a_poison_record_ends_the_job_after_the_strategys_attempts() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.json");
    std::fs::write(
        &input,
        "{\"id\": 1}\n{\"id\": 2}\n{\"id\": \"zz\"}\n{\"id\": 4}\n",
    )
    .unwrap();
    let sql = format!(
        "CREATE TABLE s (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');\n\
         CREATE TABLE d (id BIGINT) WITH ('connector' = 'blackhole');\n\
         INSERT INTO d SELECT id FROM s;",
        input.display()
    );
    let s = write_script(tmp.path(), "job.sql", &sql);
    let s = s.to_str().unwrap();
    // fixed-delay with two attempts; the default with checkpointing (exponential-delay)
    // limited to two attempts; none.
    for (settings, restarts) in [
        (
            &[
                "restart-strategy.type=fixed-delay",
                "restart-strategy.fixed-delay.attempts=2",
                "restart-strategy.fixed-delay.delay=10 ms",
            ][..],
            2,
        ),
        (
            &[
                "restart-strategy.exponential-delay.initial-backoff=10 ms",
                "restart-strategy.exponential-delay.attempts-before-reset-backoff=2",
            ][..],
            2,
        ),
        (&["restart-strategy.type=none"][..], 0),
    ] {
        let mut args = vec![s, "--checkpoint-interval", "100 ms"];
        for kv in settings {
            args.extend(["-D", kv]);
        }
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{settings:?}: {stderr}");
        assert_eq!(
            count(&stderr, "restarting from its latest completed checkpoint"),
            restarts,
            "{settings:?}: {stderr}"
        );
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.contains(&format!("cannot read '{}'", input.display())) && last.contains("line 3"),
            "{settings:?}: the job ends with the record's error: {stderr}"
        );
        if restarts > 0 {
            assert!(stderr.contains("is not restarted again"), "{stderr}");
        }
    }
}
