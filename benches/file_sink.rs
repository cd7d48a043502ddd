//! File sink benchmark: datagen → Parquet files through the real `weir` binary, with and
//! without 1 s checkpoints (each checkpoint rolls and commits a part per subtask), the
//! same job into a Delta table (`delta` connector) with 1 s and 10 s checkpoints, and the
//! file sink against a local S3-compatible server (moto) when `moto_server` is installed.
//! Prints one line per run: rows/s, MB/s of committed output, peak RSS; for Delta also
//! the commits and how long each took (from the committer taking it up, `txn.lastUpdated`,
//! to the log entry's `commitInfo.timestamp`).
//!
//! `cargo bench --bench file_sink`; `WEIR_BENCH_ROWS` (default 10 000 000) and
//! `WEIR_BENCH_S3_ROWS` (default 2 000 000) set the row counts.

use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

const SQL: &str = "
CREATE TABLE src (id BIGINT, k INT, amount DOUBLE, ts TIMESTAMP(3)) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000000000', 'number-of-rows' = '${rows}',
  'fields.k.min' = '0', 'fields.k.max' = '999'
);
CREATE TABLE dst (id BIGINT, k INT, amount DOUBLE, ts TIMESTAMP(3))
WITH (${sink});
INSERT INTO dst SELECT * FROM src;
";

fn dir_size(path: &std::path::Path) -> u64 {
    std::fs::read_dir(path)
        .map(|rd| {
            rd.flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_size(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Commits of a local Delta table with data, and the mean and longest time each took
/// (ms from `txn.lastUpdated` to `commitInfo.timestamp`).
fn delta_commits(table: &std::path::Path) -> (usize, f64, i64) {
    let mut took = Vec::new();
    for e in std::fs::read_dir(table.join("_delta_log"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if e.path().extension().is_none_or(|x| x != "json") {
            continue;
        }
        let (mut started, mut logged) = (None, None);
        for line in std::fs::read_to_string(e.path())
            .unwrap_or_default()
            .lines()
        {
            let action: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
            if let Some(t) = action["txn"]["lastUpdated"].as_i64() {
                started = Some(t);
            }
            if let Some(t) = action["commitInfo"]["timestamp"].as_i64() {
                logged = Some(t);
            }
        }
        if let (Some(s), Some(l)) = (started, logged) {
            took.push(l - s);
        }
    }
    let mean = took.iter().sum::<i64>() as f64 / took.len().max(1) as f64;
    (took.len(), mean, took.iter().copied().max().unwrap_or(0))
}

fn run(label: &str, rows: u64, out: &str, checkpoint: Option<&str>, env: &[(&str, String)]) -> f64 {
    let sink = match label.ends_with("delta") {
        true => format!("'connector' = 'delta', 'path' = '{out}'"),
        false => format!("'connector' = 'filesystem', 'path' = '{out}', 'format' = 'parquet'"),
    };
    let dir = std::env::temp_dir().join(format!("weir-bench-sink-{}-{label}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("job.sql");
    std::fs::write(
        &script,
        SQL.replace("${rows}", &rows.to_string())
            .replace("${sink}", &sink),
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.args(["run", script.to_str().unwrap(), "-p", "2"]);
    cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    if let Some(i) = checkpoint {
        cmd.args([
            "--checkpoint-interval",
            i,
            "--checkpoint-dir",
            dir.join("chk").to_str().unwrap(),
        ]);
    }
    let started = Instant::now();
    let output = cmd.output().expect("run weir");
    let secs = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "weir failed: {stderr}");
    let rss = stderr
        .split("peak RSS ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or("?");
    let bytes = if out.starts_with("s3://") {
        0
    } else {
        dir_size(std::path::Path::new(out))
    };
    let commits = match label.ends_with("delta") {
        true => {
            let (n, mean, max) = delta_commits(std::path::Path::new(out));
            format!(" delta_commits={n} commit_ms_mean={mean:.0} commit_ms_max={max}")
        }
        false => String::new(),
    };
    println!(
        "file_sink {label} rows={rows} parallelism=2 checkpoint={} wall_s={secs:.2} rows_per_s={:.0} mb_per_s={} peak_rss_mb={rss}{commits}",
        checkpoint.unwrap_or("none"),
        rows as f64 / secs,
        if bytes > 0 {
            format!("{:.1}", bytes as f64 / 1e6 / secs)
        } else {
            "-".into()
        },
    );
    let _ = std::fs::remove_dir_all(&dir);
    secs
}

fn main() {
    let rows: u64 = std::env::var("WEIR_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let s3_rows: u64 = std::env::var("WEIR_BENCH_S3_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    for (label, checkpoint) in [
        ("local-parquet", None),
        ("local-parquet", Some("1 s")),
        ("local-parquet", Some("10 s")),
        ("local-delta", Some("1 s")),
        ("local-delta", Some("10 s")),
    ] {
        let out = std::env::temp_dir().join(format!("weir-bench-out-{}", std::process::id()));
        run(label, rows, out.to_str().unwrap(), checkpoint, &[]);
        let _ = std::fs::remove_dir_all(&out);
    }
    // S3 against moto on loopback, if available.
    if Command::new("moto_server").arg("--help").output().is_err() {
        println!("file_sink s3 skipped: moto_server not installed (pip install 'moto[server]')");
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err()
        && started.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    use std::io::{Read, Write};
    write!(conn, "PUT /bench HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
    let mut resp = String::new();
    conn.read_to_string(&mut resp).unwrap();
    let env = vec![
        ("AWS_ENDPOINT", format!("http://127.0.0.1:{port}")),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("AWS_ACCESS_KEY_ID", "bench".into()),
        ("AWS_SECRET_ACCESS_KEY", "bench".into()),
        ("AWS_REGION", "us-east-1".into()),
    ];
    for checkpoint in [None, Some("1 s")] {
        run("s3-parquet", s3_rows, "s3://bench/out", checkpoint, &env);
    }
    let _ = server.kill();
    let _ = server.wait();
}
