//! State larger than memory: past `taskmanager.memory.managed.size`, a join's oldest
//! stored rows move to local disk and are read back when a probe needs them. The job's
//! rows must not change, and a job whose state is on disk when it is killed restores
//! exactly once.

use crate::common::*;

/// The dimension join of the state tests — 40,000 rows (~7 MB of join state,
/// 160-character names) read at once, then events that trickle in and look names up all
/// over it — under a memory budget: with 1 MB most of the dimension is on disk when the
/// events probe it.
fn spilling_join(dir: &std::path::Path, budget: &str, events: u64, rate: u64) -> String {
    let settings = format!(
        "SET 'taskmanager.memory.managed.size' = '{budget}';\nSET 'io.tmp.dirs' = '{}';\n",
        dir.join("spill").display()
    );
    crate::state::dimension_join_after(dir, &settings, events, rate)
}

const SPILLING: &str = "spilling the oldest rows";

/// With a 1 MB budget the join's state (over 5 MB: every checkpoint reports it) spills
/// and the job gives the rows of the same job with a 1 GB budget, which keeps everything
/// in memory; both checkpoint, so encoded state kept on disk is written too.
#[test]
fn join_state_past_the_memory_budget_spills_and_gives_the_same_rows() {
    let run = |budget: &str| {
        let tmp = tempfile::tempdir().unwrap();
        let script = spilling_join(tmp.path(), budget, 3000, 1500);
        let chk = tmp.path().join("chk");
        let out = weir()
            .env("WEIR_LOG", "info")
            .args(["run", "--quiet", &script, "-p", "2", "--checkpoint-dir"])
            .arg(&chk)
            .args(["--checkpoint-interval", "300 ms"])
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{log}");
        let rows = committed_lines(&tmp.path().join("out"));
        let state = crate::state::checkpoint_sizes(&log)
            .iter()
            .map(|(state, _)| *state)
            .max()
            .unwrap_or(0);
        (rows, log, state)
    };
    let (spilled, log, state) = run("1 mb");
    assert!(log.contains(SPILLING), "nothing spilled:\n{log}");
    // Every checkpoint was written: parts of completed checkpoints, no longer on local
    // disk, were referred to and never read.
    assert!(!log.contains("restarting"), "the job failed:\n{log}");
    assert!(
        state > 5 << 20,
        "the state ({state} bytes) is not 5 times the budget"
    );
    let (in_memory, log, _) = run("1 gb");
    assert!(!log.contains(SPILLING), "spilled under 1 GB:\n{log}");
    assert_eq!(spilled.len(), 3000);
    assert_eq!(spilled, in_memory);
}

/// The spilling join under SIGKILLs, restored each time from the latest checkpoint (whose
/// join state was written from disk): every event is joined exactly once.
#[test]
fn spilled_join_state_is_exactly_once_under_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let script = spilling_join(tmp.path(), "1 mb", 3000, 600);
    let chk = tmp.path().join("chk");
    let kills = crate::crash::kill_checkpointed_until_done(
        &script[..],
        chk.to_str().unwrap(),
        "150 ms",
        &[],
        10,
        23,
    );
    assert!(kills >= 10, "only {kills} kills");
    let lines = committed_lines(&tmp.path().join("out"));
    let eids: Vec<i64> = lines
        .iter()
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        lines.len(),
        3000,
        "events joined twice after {kills} SIGKILLs"
    );
    assert_eq!(
        eids,
        (1..=3000).collect::<Vec<_>>(),
        "events lost after {kills} SIGKILLs"
    );
}
