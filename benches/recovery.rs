//! Recovery time after a task failure: the time from the failure to the first record a
//! sink takes again, for a stateful job (an updating aggregate over 100 000 and over
//! 1 000 000 keys) with checkpoints every 1 s and every 10 s. A failure is injected into a task's third
//! checkpoint (`WEIR_FAILPOINTS`); the restart strategy restarts at once (fixed-delay,
//! 0 ms), so the figure is Weir's own: cancelling the attempt, reading the latest
//! completed checkpoint, restoring state and starting the tasks again. The job logs the
//! figure ("job processing again N ms after its last failure"); this prints one line per
//! interval.
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
    let _ = std::fs::remove_dir_all(&dir);
}
