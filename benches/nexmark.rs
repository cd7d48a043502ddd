//! Nexmark harness: runs the suite's queries through the real `weir` binary and prints one
//! line per run — query, mode, events, wall seconds, events/s, events/s per core (from the
//! process's CPU time), peak RSS, checkpoints (how many, their mean and most duration, the
//! bytes each wrote on average, the most state one referred to). Each query runs in streaming mode, then in
//! batch mode on the same generator, and, for comparison, the same generated events are
//! written once to Parquet and each query runs in batch mode on them (DataFusion's own
//! Parquet scan). q12, processing-time windows, has no batch meaning.
//!
//! Per-core figures divide by the process's CPU time (user + system) and, in a second
//! column, by its user time alone.
//!
//! `cargo bench --bench nexmark`; environment: `WEIR_NEXMARK_QUERIES` (default: every
//! query of the suite, q0–q22 but q6, q10, q13), `WEIR_NEXMARK_EVENTS`
//! (default 10 000 000), `WEIR_NEXMARK_PARALLELISM` (default 2), `WEIR_NEXMARK_BATCH`
//! (`0` skips the DataFusion comparison), `WEIR_NEXMARK_GENERATOR` (`0` skips the line
//! `query=generator`: the source alone on one core into blackhole),
//! `WEIR_NEXMARK_CHECKPOINT_INTERVAL` (default 10 s), `WEIR_NEXMARK_MODES` (default
//! `streaming,batch`), `WEIR_NEXMARK_CONF` (`key=value;key=value`: `-D` settings of every
//! run, e.g. `taskmanager.memory.managed.size=6 gb`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sql-examples/nexmark")
}

struct Run {
    wall: f64,
    cpu: Option<f64>,
    /// User CPU time alone: system time varies much more between runs on a busy kernel.
    user: Option<f64>,
    rss: String,
    checkpoints: String,
    /// Mean and most checkpoint duration (ms), mean bytes written per checkpoint and the
    /// most state one referred to (MB).
    checkpoint_ms: String,
    checkpoint_max_ms: String,
    written_mb: String,
    state_mb: String,
}

fn field<'a>(text: &'a str, after: &str) -> Option<&'a str> {
    text.split(after)
        .nth(1)?
        .split([',', ' ', 's'])
        .find(|s| !s.is_empty())
}

/// The word just before `marker`.
fn before<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    let (head, _) = text.split_once(marker)?;
    head.rsplit(' ').next().map(str::trim)
}

fn weir(args: &[&str]) -> Run {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("run")
        .args(args)
        .output()
        .expect("run weir");
    let wall = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "weir {args:?} failed: {stderr}");
    Run {
        wall,
        cpu: field(&stderr, "cpu ").and_then(|s| s.parse().ok()),
        user: field(&stderr, "(user ").and_then(|s| s.parse().ok()),
        rss: field(&stderr, "peak RSS ").unwrap_or("?").to_string(),
        checkpoints: before(&stderr, " checkpoints").unwrap_or("-").to_string(),
        checkpoint_ms: field(&stderr, "(mean ").unwrap_or("-").to_string(),
        checkpoint_max_ms: field(&stderr, ", max ").unwrap_or("-").to_string(),
        written_mb: before(&stderr, " MB written per checkpoint")
            .unwrap_or("-")
            .to_string(),
        state_mb: field(&stderr, ", largest ").unwrap_or("-").to_string(),
    }
}

fn print(query: &str, mode: &str, events: u64, r: &Run) {
    let per = |t: Option<f64>| {
        t.map(|c| format!("{:.0}", events as f64 / c))
            .unwrap_or_else(|| "?".into())
    };
    let (per_core, per_user_core) = (per(r.cpu), per(r.user));
    println!(
        "nexmark query={query} mode={mode} events={events} wall_s={:.2} events_per_s={:.0} events_per_s_per_core={per_core} events_per_s_per_user_core={per_user_core} peak_rss_mb={} checkpoints={} checkpoint_mean_ms={} checkpoint_max_ms={} written_per_checkpoint_mb={} checkpointed_state_mb={}",
        r.wall,
        events as f64 / r.wall,
        r.rss,
        r.checkpoints,
        r.checkpoint_ms,
        r.checkpoint_max_ms,
        r.written_mb,
        r.state_mb,
    );
}

fn main() {
    let queries = std::env::var("WEIR_NEXMARK_QUERIES").unwrap_or_else(|_| {
        "q0,q1,q2,q3,q4,q5,q7,q8,q9,q11,q12,q14,q15,q16,q17,q18,q19,q20,q21,q22".into()
    });
    let events: u64 = std::env::var("WEIR_NEXMARK_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let parallelism = std::env::var("WEIR_NEXMARK_PARALLELISM").unwrap_or_else(|_| "2".into());
    let interval =
        std::env::var("WEIR_NEXMARK_CHECKPOINT_INTERVAL").unwrap_or_else(|_| "10 s".into());
    let compare = std::env::var("WEIR_NEXMARK_BATCH")
        .map(|v| v != "0")
        .unwrap_or(true);
    let dir = std::env::temp_dir().join(format!("weir-nexmark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ddl = root().join("ddl.sql");
    let vars = [
        "--var".to_string(),
        "TPS=10000000".into(),
        "--var".into(),
        format!("EVENTS_NUM={events}"),
        "--var".into(),
        "PERSON_PROPORTION=1".into(),
        "--var".into(),
        "AUCTION_PROPORTION=3".into(),
        "--var".into(),
        "BID_PROPORTION=46".into(),
    ];
    let mut vars: Vec<&str> = vars.iter().map(String::as_str).collect();
    let conf = std::env::var("WEIR_NEXMARK_CONF").unwrap_or_default();
    for setting in conf.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        vars.extend(["-D", setting]);
    }
    let modes = std::env::var("WEIR_NEXMARK_MODES").unwrap_or_else(|_| "streaming,batch".into());
    let (streaming_on, batch_on) = (modes.contains("streaming"), modes.contains("batch"));

    // The generator alone: every column of every event on one core, into blackhole (the
    // suite's table without its computed `dateTime` column and watermark).
    if std::env::var("WEIR_NEXMARK_GENERATOR").map_or(true, |v| v != "0") {
        let text = std::fs::read_to_string(&ddl).unwrap();
        let table = &text[text.find("CREATE TABLE nexmark_table (").unwrap()..];
        let columns = table[..table.find("    `dateTime` AS").unwrap()]
            .trim_end()
            .trim_end_matches(',');
        let with = &table[table.find(") WITH (").unwrap()..table.find(");").unwrap() + 2];
        let script = dir.join("generator.sql");
        std::fs::write(
            &script,
            format!(
                "{columns}\n{with}\n\
                 CREATE TABLE generator_sink (event_type INT) WITH ('connector' = 'blackhole');\n\
                 INSERT INTO generator_sink SELECT event_type FROM nexmark_table;\n"
            ),
        )
        .unwrap();
        let mut args = vec![script.to_str().unwrap(), "-p", "1"];
        args.extend(&vars);
        print("generator", "streaming-p1", events, &weir(&args));
    }

    // DataFusion's limit: the same events, written once to Parquet.
    let parquet_ddl = dir.join("ddl_parquet.sql");
    if compare {
        let data = dir.join("events");
        let generate = dir.join("generate.sql");
        std::fs::write(
            &generate,
            format!(
                "CREATE TABLE events_parquet WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'parquet') LIKE_PLACEHOLDER;",
                data.display()
            ),
        )
        .unwrap();
        // Same columns as the source table, stored as Parquet.
        let text = std::fs::read_to_string(&ddl).unwrap();
        let columns = &text[text.find("CREATE TABLE nexmark_table (").unwrap()
            + "CREATE TABLE nexmark_table (".len()
            ..text.find("    `dateTime` AS").unwrap()];
        let columns = columns.trim().trim_end_matches(',');
        std::fs::write(
            &generate,
            format!(
                "CREATE TABLE events_parquet ({columns}) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'parquet');\n\
                 INSERT INTO events_parquet SELECT event_type, person, auction, bid FROM nexmark_table;",
                data.display()
            ),
        )
        .unwrap();
        let mut args = vec![
            ddl.to_str().unwrap(),
            generate.to_str().unwrap(),
            "--mode",
            "batch",
            "--quiet",
        ];
        args.extend(&vars);
        weir(&args);
        let with =
            &text[text.find(") WITH (").unwrap()..text.find(");\n\nCREATE VIEW person").unwrap()];
        let parquet_text = text.replace(
            with,
            &format!(
                ") WITH (\n    'connector' = 'filesystem', 'format' = 'parquet', 'path' = '{}'\n",
                data.display()
            ),
        );
        std::fs::write(&parquet_ddl, parquet_text).unwrap();
    }

    for q in queries.split(',').map(str::trim) {
        let query = root().join(format!("{q}.sql"));
        let chk = dir.join(format!("chk-{q}"));
        let mut args = vec![
            ddl.to_str().unwrap(),
            query.to_str().unwrap(),
            "-p",
            &parallelism,
            "--checkpoint-interval",
            &interval,
            "--checkpoint-dir",
            chk.to_str().unwrap(),
        ];
        args.extend(&vars);
        let streaming = streaming_on.then(|| weir(&args));
        // Checkpoints of large state fill the disk: only one query's at a time.
        let _ = std::fs::remove_dir_all(&chk);
        if let Some(streaming) = &streaming {
            print(q, "streaming", events, streaming);
        }
        // q12 (processing-time windows) has no batch counterpart.
        if q == "q12" || !batch_on {
            continue;
        }
        // Batch mode on the generator itself (its partitions read lazily by DataFusion).
        let mut args = vec![
            ddl.to_str().unwrap(),
            query.to_str().unwrap(),
            "-p",
            &parallelism,
            "--mode",
            "batch",
        ];
        args.extend(&vars);
        let batch = weir(&args);
        print(q, "batch", events, &batch);
        let Some(streaming) = streaming else { continue };
        println!(
            "nexmark query={q} streaming_over_batch_wall_ratio={:.2}",
            streaming.wall / batch.wall
        );
        if compare {
            let args = [
                parquet_ddl.to_str().unwrap(),
                query.to_str().unwrap(),
                "--mode",
                "batch",
            ];
            let batch = weir(&args);
            print(q, "datafusion-batch-parquet", events, &batch);
            println!(
                "nexmark query={q} streaming_over_datafusion_batch_wall_ratio={:.2}",
                streaming.wall / batch.wall
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
