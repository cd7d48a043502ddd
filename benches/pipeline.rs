//! Whole-pipeline benchmark: datagen → filter/projection → blackhole, through the real
//! `weir` binary, at parallelism 1 and 2, with and without 1 s checkpoints. Prints one
//! line per run: rows/s and peak RSS (as reported by the binary). Then the cost of the
//! detailed per-subtask metrics (bytes, busy/idle/back-pressured time): three runs each
//! with `metrics.task.detailed` on and off, alternating, best of three compared.
//!
//! `cargo bench --bench pipeline` (profile `bench`); set `WEIR_BENCH_ROWS` to change the
//! row count (default 10 000 000).

use std::process::Command;
use std::time::Instant;

const SQL: &str = "
CREATE TABLE src (id BIGINT, k INT, amount DOUBLE, ts TIMESTAMP(3)) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000000000', 'number-of-rows' = '${rows}',
  'fields.k.min' = '0', 'fields.k.max' = '999', 'fields.amount.min' = '0', 'fields.amount.max' = '100'
);
CREATE TABLE sink (id BIGINT, k INT, taxed DOUBLE, ts TIMESTAMP(3)) WITH ('connector' = 'blackhole');
INSERT INTO sink SELECT id, k, amount * 1.2, ts FROM src WHERE k % 10 <> 0;
";

fn main() {
    let rows: u64 = std::env::var("WEIR_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let dir = std::env::temp_dir().join(format!("weir-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("pipeline.sql");
    std::fs::write(&script, SQL.replace("${rows}", &rows.to_string())).unwrap();
    for parallelism in [1, 2] {
        for checkpoint in [None, Some("1 s")] {
            let (secs, rss) = run(&script, &dir, parallelism, checkpoint, true);
            println!(
                "pipeline rows={rows} parallelism={parallelism} checkpoint={} wall_s={secs:.2} rows_per_s={:.0} peak_rss_mb={rss}",
                checkpoint.unwrap_or("none"),
                rows as f64 / secs
            );
        }
    }
    for parallelism in [1, 2] {
        let (mut on, mut off) = (f64::MAX, f64::MAX);
        for _ in 0..3 {
            on = on.min(run(&script, &dir, parallelism, None, true).0);
            off = off.min(run(&script, &dir, parallelism, None, false).0);
        }
        println!(
            "metrics_overhead rows={rows} parallelism={parallelism} detailed_rows_per_s={:.0} plain_rows_per_s={:.0} overhead_pct={:.1}",
            rows as f64 / on,
            rows as f64 / off,
            (on / off - 1.0) * 100.0
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One run of the script: wall seconds and the peak RSS the binary reported.
fn run(
    script: &std::path::Path,
    dir: &std::path::Path,
    parallelism: usize,
    checkpoint: Option<&str>,
    detailed_metrics: bool,
) -> (f64, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.args([
        "run",
        script.to_str().unwrap(),
        "-p",
        &parallelism.to_string(),
        "-D",
        &format!("metrics.task.detailed={detailed_metrics}"),
    ]);
    if let Some(interval) = checkpoint {
        cmd.args([
            "--checkpoint-interval",
            interval,
            "--checkpoint-dir",
            dir.join("chk").to_str().unwrap(),
        ]);
    }
    let started = Instant::now();
    let out = cmd.output().expect("run weir");
    let secs = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "weir failed: {stderr}");
    let rss = stderr
        .split("peak RSS ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or("?")
        .to_string();
    (secs, rss)
}
