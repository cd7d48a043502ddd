//! Weir's canonical job end to end, with every part real: orders arrive in a Kafka topic
//! (the Tansu broker), a window aggregate counts them per ten seconds of event time, and
//! the results land as Parquet on S3 (the moto server) with checkpoints there too — while
//! the job is SIGKILLed and restarted at another parallelism.

use crate::common::*;
use crate::kafka::{Broker, broker, send};
use crate::s3::server;
use rdkafka::producer::Producer;
use std::time::{Duration, Instant};

const ORDERS: i64 = 6000;
/// Event time advances 50 ms per order: 200 orders per 10-second window.
const STEP_MS: i64 = 50;

fn order(i: i64) -> String {
    let ms = i * STEP_MS;
    format!(
        r#"{{"id": {i}, "amount": {}, "ts": "2026-01-01 00:{:02}:{:02}.{:03}"}}"#,
        i % 100,
        ms / 60_000,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// The windows the final watermark closes (the last order's time minus the two seconds
/// of delay), as the Parquet reader shows them: start, count, sum of amounts.
fn expected_windows() -> Vec<String> {
    let watermark = (ORDERS - 1) * STEP_MS - 2000;
    let mut windows = Vec::new();
    let mut start = 0;
    while start + 10_000 <= watermark + 1 {
        let ids = (start / STEP_MS)..((start + 10_000) / STEP_MS);
        let sum: i64 = ids.clone().map(|i| i % 100).sum();
        windows.push(format!(
            "2026-01-01T00:{:02}:{:02},{},{sum}",
            start / 60_000,
            start / 1000 % 60,
            ids.count()
        ));
        start += 10_000;
    }
    windows.sort();
    windows
}

/// Kafka → TUMBLE → exactly-once Parquet on S3, under 12 SIGKILLs at parallelism 2 and 3
/// while the orders arrive: the committed Parquet rows are exactly the closed windows'
/// counts and sums, none missing and none twice.
#[test]
fn kafka_window_aggregate_to_parquet_on_s3_is_exactly_once_under_sigkill() {
    let (Some(b), Some(s3)) = (broker(), server()) else {
        return;
    };
    b.create_topic("orders", 3);
    s3.create_bucket("canonical");
    let tmp = tempfile::tempdir().unwrap();
    // The example script itself, pointed at the test's broker and bucket; the
    // checkpoint settings come from the command line.
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sql-examples/kafka_orders_to_s3.sql");
    let sql = std::fs::read_to_string(example)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("SET "))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("localhost:9092", &b.bootstrap)
        .replace("s3://weir-demo/", "s3://canonical/");
    let s = write_script(tmp.path(), "canonical.sql", &sql);
    let bootstrap = b.bootstrap.clone();
    let producing = std::thread::spawn(move || {
        let b = Broker { bootstrap };
        let producer = b.producer();
        for i in 0..ORDERS {
            send(&producer, "orders", (i % 3) as i32, &order(i));
            if i % 60 == 0 {
                std::thread::sleep(Duration::from_millis(60));
            }
        }
        producer.flush(Duration::from_secs(30)).unwrap();
    });
    let env = s3.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let spawn_at = |p: &str| {
        spawn(
            &[
                s.to_str().unwrap(),
                "-p",
                p,
                "--checkpoint-dir",
                "s3://canonical/chk",
                "--checkpoint-interval",
                "200 ms",
                "--restore",
                "latest",
            ],
            &env,
        )
    };
    let kills = kill_while_producing(spawn_at, &["2", "3"], 12, (400, 600), producing, 31);
    // A last run reads the rest; once every closed window is committed it is killed too.
    let expected = expected_windows();
    let mut child = spawn_at("2");
    let waiting = Instant::now();
    while s3.committed_parquet_rows("canonical", "totals").len() < expected.len() {
        assert!(
            waiting.elapsed() < Duration::from_secs(90),
            "after {kills} kills only {} of {} windows are committed",
            s3.committed_parquet_rows("canonical", "totals").len(),
            expected.len()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    std::thread::sleep(Duration::from_millis(600));
    child.kill().unwrap();
    child.wait().unwrap();
    let got = s3.committed_parquet_rows("canonical", "totals");
    eprintln!(
        "canonical pipeline: {kills} SIGKILLs, {} windows of {ORDERS} orders checked",
        got.len()
    );
    assert_eq!(got, expected, "after {kills} kills");
}
