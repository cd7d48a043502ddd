//! Recovery time after a task failure: the time from the failure to the first record a
//! sink takes again, for a stateful job (an updating aggregate over 100 000 and over
//! 1 000 000 keys) with checkpoints every 1 s and every 10 s. A failure is injected into a task's third
//! checkpoint (`WEIR_FAILPOINTS`); the restart strategy restarts at once (fixed-delay,
//! 0 ms), so the figure is Weir's own: cancelling the attempt, reading the latest
//! completed checkpoint, restoring state and starting the tasks again. The job logs the
//! figure ("job processing again N ms after its last failure"); this prints one line per
//! interval.
//!
//! Then the same for state larger than memory: Nexmark q20 (a join whose state only grows)
//! over `WEIR_RECOVERY_JOIN_EVENTS` events (default 30 000 000) with a 256 MB state budget
//! and 2 s checkpoints, failing in its fifth checkpoint, once about 2 GB of join state
//! are checkpointed. It prints the state restored, the time to process again, the first
//! checkpoint after the restart (duration and bytes written) and the process's peak RSS.
//!
//! `cargo bench --bench recovery` (profile `bench`).

use std::process::Command;
use std::time::Instant;

const RATE: u64 = 100_000;

fn main() {
    let dir = std::env::temp_dir().join(format!("weir-bench-recovery-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (keys, interval_s) in [
        (100_000, 1u64),
        (100_000, 10),
        (1_000_000, 1),
        (1_000_000, 10),
    ] {
        // Long enough for three checkpoints and some more.
        let rows = RATE * (3 * interval_s + 8);
        let sql = format!(
            "CREATE TABLE src (k INT, amount DOUBLE) WITH (
               'connector' = 'datagen', 'rows-per-second' = '{RATE}', 'number-of-rows' = '{rows}',
               'fields.k.min' = '0', 'fields.k.max' = '{}');
             CREATE TABLE sink (k INT, n BIGINT, total DOUBLE) WITH ('connector' = 'blackhole');
             INSERT INTO sink SELECT k, COUNT(*), SUM(amount) FROM src GROUP BY k;",
            keys - 1
        );
        let script = dir.join("recovery.sql");
        std::fs::write(&script, sql).unwrap();
        let chk = dir.join(format!("chk-{keys}-{interval_s}"));
        let started = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["run", "--quiet", script.to_str().unwrap(), "-p", "2"])
            .args(["--checkpoint-dir", chk.to_str().unwrap()])
            .args(["--checkpoint-interval", &format!("{interval_s} s")])
            .args(["-D", "restart-strategy.type=fixed-delay"])
            .args(["-D", "restart-strategy.fixed-delay.delay=0 ms"])
            // Two tasks (the source chained with the partial work, the aggregate chained
            // with the sink) per subtask: the 9th state write is in the 3rd checkpoint.
            .env("WEIR_FAILPOINTS", "after-task-state=fail:9")
            .env("WEIR_LOG", "info")
            .output()
            .expect("run weir");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "weir failed: {stderr}");
        let recovery_ms = stderr
            .split("job processing again ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or_else(|| panic!("no recovery was logged:\n{stderr}"));
        let state_bytes = stderr
            .lines()
            .rfind(|l| l.contains("bytes of state"))
            .and_then(|l| l.split(" (").nth(1))
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or("?");
        println!(
            "recovery keys={keys} checkpoint_interval_s={interval_s} state_bytes={state_bytes} failure_to_first_record_ms={recovery_ms} wall_s={:.1}",
            started.elapsed().as_secs_f64()
        );
    }
    spilled_join(&dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A restart of Nexmark q20 whose join state is several times its memory budget.
fn spilled_join(dir: &std::path::Path) {
    let events: u64 = std::env::var("WEIR_RECOVERY_JOIN_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30_000_000);
    let nexmark = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql-examples/nexmark");
    let chk = dir.join("chk-q20");
    let started = Instant::now();
    let mut weir = Command::new(env!("CARGO_BIN_EXE_weir"));
    weir.arg("run")
        .args([nexmark.join("ddl.sql"), nexmark.join("q20.sql")])
        .args(["-p", "2", "--checkpoint-interval", "2 s"])
        .args(["--checkpoint-dir", chk.to_str().unwrap()]);
    let vars = [
        "TPS=10000000".to_string(),
        format!("EVENTS_NUM={events}"),
        "PERSON_PROPORTION=1".into(),
        "AUCTION_PROPORTION=3".into(),
        "BID_PROPORTION=46".into(),
    ];
    for var in &vars {
        weir.args(["--var", var]);
    }
    let out = weir
        .args(["-D", "taskmanager.memory.managed.size=256 mb"])
        .args(["-D", "restart-strategy.type=fixed-delay"])
        .args(["-D", "restart-strategy.fixed-delay.delay=0 ms"])
        // Eight state writes per checkpoint (four tasks per subtask): the 40th is in the
        // 5th, which follows about 2 GB of checkpointed join state.
        .env("WEIR_FAILPOINTS", "after-task-state=fail:40")
        .env("WEIR_LOG", "info")
        .output()
        .expect("run weir");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "weir failed: {stderr}");
    let (before, after) = stderr
        .split_once("injected a failure")
        .unwrap_or_else(|| panic!("no failure was injected:\n{stderr}"));
    let completions = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.contains(" complete in "))
            .map(|l| l.split("checkpoint ").nth(1).unwrap_or(l).to_string())
            .collect()
    };
    let restored = completions(before).pop().unwrap_or_else(|| "none".into());
    let first_after = completions(after).into_iter().next().unwrap_or_default();
    let again = after
        .split("job processing again ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or("?");
    let rss = stderr
        .split("peak RSS ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap_or("?");
    println!(
        "recovery spilled_join events={events} restored=[checkpoint {restored}] \
         failure_to_first_record_ms={again} first_checkpoint_after=[{first_after}] \
         peak_rss={rss} wall_s={:.1}",
        started.elapsed().as_secs_f64()
    );
}
