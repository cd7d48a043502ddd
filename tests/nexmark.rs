//! Nexmark: the suite's query files run unchanged but for their placeholders; for every
//! query Weir runs in streaming mode, the committed streaming output (parallelism 2, with
//! checkpoints) equals the batch result of the same SQL on the same generated events.
//! Results are written as debezium-json changelogs and materialized, so updating queries
//! (aggregates without windows, Top-N) compare their final tables.

use crate::common::*;
use std::path::Path;

/// Nexmark query `q` writing debezium-json files into `out` instead of a blackhole.
pub(crate) fn query_with_file_sink(q: &str, out: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql-examples/nexmark");
    let text = std::fs::read_to_string(root.join(format!("{q}.sql"))).unwrap();
    text.replace(
        "'connector' = 'blackhole'",
        &format!(
            "'connector' = 'filesystem', 'path' = '{}', 'format' = 'debezium-json'",
            out.display()
        ),
    )
}

/// The `--var`s of `sql-examples/nexmark/ddl.sql` for `events` events at 1,000 events
/// per second of event time: one event per millisecond, so ordering by time has no ties
/// (with ties, a Top-N's batch result would be one of several).
pub(crate) fn nexmark_vars(events: u32) -> Vec<String> {
    [
        "TPS=1000".to_string(),
        format!("EVENTS_NUM={events}"),
        "PERSON_PROPORTION=1".to_string(),
        "AUCTION_PROPORTION=3".to_string(),
        "BID_PROPORTION=46".to_string(),
    ]
    .into_iter()
    .flat_map(|v| ["--var".to_string(), v])
    .collect()
}

fn run_query(q: &str, dir: &Path, extra: &[&str]) -> Vec<String> {
    let ddl = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql-examples/nexmark/ddl.sql");
    let out = dir.join("out");
    let script = write_script(dir, &format!("{q}.sql"), &query_with_file_sink(q, &out));
    let vars = nexmark_vars(6000);
    let mut args = vec![ddl.to_str().unwrap(), script.to_str().unwrap()];
    args.extend(vars.iter().map(String::as_str));
    args.extend_from_slice(extra);
    run_ok(&args);
    materialize(committed_lines(&out))
}

/// The part of a query's rows that SQL defines: q19 ranks bids by price alone, so which of
/// two equal-priced bids gets rank 5 or 6 is up to the engine; the price at each rank is not.
fn deterministic(q: &str, rows: Vec<String>) -> Vec<String> {
    if q != "q19" {
        return rows;
    }
    let mut out: Vec<String> = rows
        .iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_str(r).unwrap();
            format!("{} {} {}", v["auction"], v["rank_number"], v["price"])
        })
        .collect();
    out.sort();
    out
}

fn agree_with_batch(queries: &[&str]) {
    for q in queries {
        let q = *q;
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let chk = a.path().join("chk");
        let streaming = run_query(
            q,
            a.path(),
            &[
                "-p",
                "2",
                "--checkpoint-interval",
                "50 ms",
                "--checkpoint-dir",
                chk.to_str().unwrap(),
            ],
        );
        let batch = run_query(q, b.path(), &["--mode", "batch"]);
        assert!(!streaming.is_empty(), "{q}: no output");
        let (streaming, batch) = (deterministic(q, streaming), deterministic(q, batch));
        assert!(
            streaming == batch,
            "{q}: streaming and batch differ ({} vs {} rows; first difference: {:?})",
            streaming.len(),
            batch.len(),
            streaming.iter().zip(&batch).find(|(a, b)| a != b)
        );
    }
}

#[test]
fn append_only_queries_agree_with_batch() {
    agree_with_batch(&[
        "q0", "q1", "q2", "q3", "q5", "q7", "q8", "q11", "q14", "q20", "q21", "q22",
    ]);
}

/// Aggregates without windows (q4, q15–q17) and Top-N/deduplication (q9, q18, q19):
/// their changelogs, materialized, equal the batch tables.
#[test]
fn updating_queries_agree_with_batch() {
    agree_with_batch(&["q4", "q9", "q15", "q16", "q17", "q18", "q19"]);
}

#[test]
fn generator_is_deterministic_and_follows_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let lines = run_query("q0", dir.path(), &["-p", "3"]);
    // 6000 events: 120 people, 360 auctions, 5520 bids.
    assert_eq!(lines.len(), 5520);
    let again = run_query("q0", tempfile::tempdir().unwrap().path(), &["-p", "1"]);
    assert_eq!(lines, again, "the event stream depends on the parallelism");
    let prices: Vec<i64> = lines
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["price"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert!(prices.iter().all(|p| (100..=100_000_000).contains(p)));
}

/// q11 (session windows; also compared with batch mode above) and q12 (processing-time
/// windows, which depend on the wall clock, so there is no batch result to compare with):
/// every bid is counted in exactly one window (6,000 events hold 5,520 bids).
#[test]
fn session_and_processing_time_queries_count_every_bid_once() {
    for q in ["q11", "q12"] {
        let dir = tempfile::tempdir().unwrap();
        let chk = dir.path().join("chk");
        let rows = run_query(
            q,
            dir.path(),
            &[
                "-p",
                "2",
                "--checkpoint-interval",
                "50 ms",
                "--checkpoint-dir",
                chk.to_str().unwrap(),
            ],
        );
        let counted: i64 = rows
            .iter()
            .map(|r| {
                serde_json::from_str::<serde_json::Value>(r).unwrap()["bid_count"]
                    .as_i64()
                    .unwrap()
            })
            .sum();
        assert_eq!(counted, 5520, "{q}");
    }
}

/// FLIP-147 with periodic checkpoints: the sources ending is no reason for a checkpoint
/// (the join still holds its rows then, and nothing of the sources' awaits a commit). A
/// bounded q20's only checkpoint is its final one, taken as soon as the whole job has
/// ended rather than at the 60 s interval, and it holds no join rows.
#[test]
fn a_bounded_join_checkpoints_once_when_it_ends() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql-examples/nexmark");
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let started = std::time::Instant::now();
    let out = weir()
        .arg("run")
        .args([root.join("ddl.sql"), root.join("q20.sql")])
        .args(["-p", "2", "--checkpoint-interval", "60 s"])
        .args(["--checkpoint-dir", chk.to_str().unwrap()])
        .args(["--var", "TPS=10000000", "--var", "EVENTS_NUM=500000"])
        .args([
            "--var",
            "PERSON_PROPORTION=1",
            "--var",
            "AUCTION_PROPORTION=3",
        ])
        .args(["--var", "BID_PROPORTION=46"])
        .env("WEIR_LOG", "info")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    let completed: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(" complete in "))
        .collect();
    assert_eq!(completed.len(), 1, "{completed:#?}");
    let bytes: u64 = completed[0]
        .split(" (")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no state size in {}", completed[0]));
    assert!(bytes < 64 << 10, "{}", completed[0]);
}
