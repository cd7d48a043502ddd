//! Updating aggregate against window aggregate: 10M generated bids (10,000 auctions)
//! `GROUP BY auction` with `COUNT(*), MAX(price)` into blackhole, and the same aggregate
//! over a `TUMBLE` window holding every row, through the real `weir` binary at
//! parallelism 2. Prints one line per query (wall seconds, rows/s, CPU seconds, peak RSS,
//! rows out) and the ratio of the two wall times.
//!
//! `cargo bench --bench aggregate` (profile `bench`); `WEIR_BENCH_ROWS` changes the row
//! count (default 10 000 000), `WEIR_BENCH_GROUPS` the auctions (default 10 000),
//! `WEIR_BENCH_BUDGET` sets `taskmanager.memory.managed.size` (e.g. `16 mb`, to measure
//! state moving to disk).

use std::process::Command;
use std::time::Instant;

const TABLE: &str = "
CREATE TABLE bid (auction BIGINT, price BIGINT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000000000', 'number-of-rows' = '${rows}',
  'fields.auction.min' = '0', 'fields.auction.max' = '${max}',
  'fields.price.min' = '1', 'fields.price.max' = '100000');
";

const QUERIES: [(&str, &str); 2] = [
    (
        "group",
        "CREATE TABLE sink (auction BIGINT, n BIGINT, top BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO sink SELECT auction, COUNT(*), MAX(price) FROM bid GROUP BY auction;",
    ),
    (
        "tumble",
        "CREATE TABLE sink (auction BIGINT, ws TIMESTAMP(3), n BIGINT, top BIGINT)
         WITH ('connector' = 'blackhole');
         INSERT INTO sink SELECT auction, window_start, COUNT(*), MAX(price)
         FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '1' HOUR))
         GROUP BY auction, window_start, window_end;",
    ),
];

fn main() {
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let rows = var("WEIR_BENCH_ROWS", 10_000_000);
    let groups = var("WEIR_BENCH_GROUPS", 10_000);
    let dir = std::env::temp_dir().join(format!("weir-bench-agg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut walls = Vec::new();
    for (name, query) in QUERIES {
        let script = dir.join(format!("{name}.sql"));
        let table = TABLE
            .replace("${rows}", &rows.to_string())
            .replace("${max}", &(groups - 1).to_string());
        let budget = std::env::var("WEIR_BENCH_BUDGET")
            .map(|b| format!("SET 'taskmanager.memory.managed.size' = '{b}';\n"))
            .unwrap_or_default();
        std::fs::write(&script, format!("{budget}{table}{query}")).unwrap();
        let started = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["run", script.to_str().unwrap(), "-p", "2"])
            .output()
            .expect("run weir");
        let wall = started.elapsed().as_secs_f64();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name} failed: {stderr}");
        let after = |key: &str| {
            stderr
                .split(key)
                .nth(1)
                .and_then(|s| s.split([',', ' ']).find(|s| !s.is_empty()))
                .unwrap_or("?")
                .to_string()
        };
        println!(
            "aggregate query={name} rows={rows} groups={groups} wall_s={wall:.2} rows_per_s={:.0} cpu_s={} peak_rss_mb={} rows_out={}",
            rows as f64 / wall,
            after("cpu ").trim_end_matches('s'),
            after("peak RSS "),
            stderr
                .split(" rows out")
                .next()
                .and_then(|s| s.rsplit(' ').next())
                .unwrap_or("?"),
        );
        walls.push(wall);
    }
    println!(
        "aggregate group_over_tumble_wall_ratio={:.2}",
        walls[0] / walls[1]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
