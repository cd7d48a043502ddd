//! Golden SQL tests: each `tests/sql/NAME.sql` writes JSON lines to `${out}`; the sorted
//! committed lines must equal `tests/sql/NAME.expected`. Every script runs three ways —
//! straight through at parallelism 1; at parallelism 2 with checkpoints every 100 ms;
//! and at parallelism 2, SIGKILLed after its first checkpoint, restored at parallelism
//! 3 — and all three must agree with the golden file. The second and third run with a
//! state memory budget of one kilobyte, so every join side that can keep its rows on
//! disk does (all but its newest batch), and the restore reads such state. A fourth run
//! in batch mode (DataFusion's execution) must agree too. `WEIR_BLESS=1` rewrites the
//! files.
//!
//! Updating queries write `debezium-json` changelogs; their lines are materialized first
//! (each `after` row counts +1, each `before` row -1), so the golden file holds the final
//! table and a lost or repeated change shows up as a wrong (or negative) count.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A fresh folder with the script rendered to write into its `out` folder.
fn workspace(template: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let script = write_script(
        tmp.path(),
        "job.sql",
        &render(template, &[("out", out.to_str().unwrap())]),
    );
    (tmp, out, script)
}

/// Keeps as little of a job's state in memory as it can (see the module docs).
const TINY_STATE_BUDGET: &str = "taskmanager.memory.managed.size=1 kb";

fn golden(name: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sql");
    let template = std::fs::read_to_string(root.join(format!("{name}.sql"))).unwrap();
    let expected_path = root.join(format!("{name}.expected"));

    // 1. Straight through.
    let (_tmp, out, script) = workspace(&template);
    run_ok(&[script.to_str().unwrap(), "-p", "1"]);
    let straight = materialize(committed_lines(&out));
    assert!(!straight.is_empty(), "{name}: no output");
    if std::env::var("WEIR_BLESS").is_ok() {
        std::fs::write(&expected_path, straight.join("\n") + "\n").unwrap();
    }
    let expected: Vec<String> = std::fs::read_to_string(&expected_path)
        .unwrap_or_else(|_| panic!("{name}: no golden file; run with WEIR_BLESS=1"))
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(
        straight, expected,
        "{name}: straight run differs from the golden file"
    );

    // 2. Parallelism 2, checkpoints every 100 ms, state on disk.
    let (tmp, out, script) = workspace(&template);
    let chk = tmp.path().join("chk");
    run_ok(&[
        script.to_str().unwrap(),
        "-p",
        "2",
        "--checkpoint-dir",
        chk.to_str().unwrap(),
        "--checkpoint-interval",
        "100 ms",
        "-D",
        TINY_STATE_BUDGET,
    ]);
    assert_eq!(
        materialize(committed_lines(&out)),
        expected,
        "{name}: checkpointed run at p=2 differs"
    );

    // 3. Killed after the first checkpoint, restored at parallelism 3.
    let (tmp, out, script) = workspace(&template);
    let chk = tmp.path().join("chk");
    let (s, c) = (script.to_str().unwrap(), chk.to_str().unwrap());
    let mut child = spawn(
        &[
            s,
            "-p",
            "2",
            "--checkpoint-dir",
            c,
            "--checkpoint-interval",
            "100 ms",
            "-D",
            TINY_STATE_BUDGET,
        ],
        &[],
    );
    let started = Instant::now();
    while !has_checkpoint(&chk) && started.elapsed() < Duration::from_secs(60) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let killed = child.try_wait().unwrap().is_none();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        killed,
        "{name}: the job ended before it could be killed; slow its source down"
    );
    run_ok(&[
        s,
        "-p",
        "3",
        "--checkpoint-dir",
        c,
        "--checkpoint-interval",
        "100 ms",
        "--restore",
        "latest",
        "-D",
        TINY_STATE_BUDGET,
    ]);
    assert_eq!(
        materialize(committed_lines(&out)),
        expected,
        "{name}: killed and restored at p=3 differs"
    );

    // 4. Batch mode: the same rows, computed by DataFusion (unless the script says why not).
    if template.contains("-- batch: skip") {
        return;
    }
    let (_tmp, out, script) = workspace(&template);
    run_ok(&[script.to_str().unwrap(), "--mode", "batch"]);
    assert_eq!(
        materialize(committed_lines(&out)),
        expected,
        "{name}: batch mode differs from streaming"
    );
}

#[test]
fn golden_projection_filter() {
    golden("projection_filter");
}

#[test]
fn golden_computed_columns_and_watermark() {
    golden("computed_watermark");
}

#[test]
fn golden_union_of_views() {
    golden("union_views");
}

#[test]
fn golden_partitioned_sink() {
    golden("partitioned");
}

#[test]
fn golden_tumble_window_aggregate() {
    golden("tumble_window");
}

#[test]
fn golden_unnest_into_a_window_aggregate() {
    golden("unnest");
}

#[test]
fn golden_hop_and_cumulate_windows() {
    golden("hop_cumulate_windows");
}

#[test]
fn golden_inner_join() {
    golden("inner_join");
}

#[test]
fn golden_semi_join() {
    golden("semi_join");
}

#[test]
fn golden_updating_group_aggregate() {
    golden("group_aggregate");
}

/// MIN/MAX over a changelog take back any value, not only the oldest.
#[test]
fn golden_min_and_max_over_a_changelog() {
    golden("changelog_min_max");
}

#[test]
fn golden_top_n_and_deduplication() {
    golden("top_n");
}

#[test]
fn golden_session_and_legacy_tumble_windows() {
    golden("session_window");
}

#[test]
fn golden_outer_joins() {
    golden("outer_join");
}

#[test]
fn golden_window_join() {
    golden("window_join");
}

#[test]
fn golden_interval_join() {
    golden("interval_join");
}

#[test]
fn golden_inner_joins_over_updating_inputs() {
    golden("updating_join");
}

#[test]
fn golden_anti_join() {
    golden("anti_join");
}

#[test]
fn golden_grouping_sets_rollup_and_cube() {
    golden("grouping_sets");
}

#[test]
fn golden_temporal_sort_and_order_by_limit() {
    golden("order_by");
}

#[test]
fn golden_over_aggregates() {
    golden("over");
}

#[test]
fn golden_temporal_joins() {
    golden("temporal_join");
}

#[test]
fn golden_match_recognize() {
    golden("match_recognize");
}
