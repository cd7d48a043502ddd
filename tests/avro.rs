//! The `avro` format against an independent implementation (Python's fastavro, driven by
//! `tests/avro/avro_tool.py`, with the Avro schema Flink derives for the table): files it
//! writes are read by Weir and files Weir writes are read by it; the same for raw Avro
//! records in Kafka messages.

use crate::common::*;
use crate::kafka::broker;
use std::path::Path;

/// Runs `avro_tool.py` with `args`; `None` (loudly) where fastavro is missing outside CI.
fn avro_tool(args: &[&str]) -> Option<Vec<String>> {
    let works = std::process::Command::new("python3")
        .args(["-c", "import fastavro"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !works {
        assert!(
            std::env::var("CI").is_err(),
            "fastavro is required in CI (pip install fastavro==1.12.1)"
        );
        eprintln!("\n*** SKIPPING AVRO TEST: pip install fastavro==1.12.1 ***\n");
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/avro/avro_tool.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("run avro_tool.py");
    assert!(
        out.status.success(),
        "avro_tool.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect(),
    )
}

/// The rows of `lines` (`avro_tool.py` output) whose id is not a multiple of 7.
fn kept(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| {
            let row: serde_json::Value = serde_json::from_str(l).unwrap();
            row["id"].as_i64().unwrap() % 7 != 0
        })
        .cloned()
        .collect()
}

const COLUMNS: &str = "id BIGINT NOT NULL, name STRING, price DECIMAL(10, 2), ts TIMESTAMP(3)";

/// Avro files: fastavro's file (deflate) read by Weir, filtered and written as Avro with
/// each codec; fastavro reads every row back with Flink's schema (record `record`).
#[test]
fn avro_files_are_read_and_written_as_flink_lays_them_out() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    let data = input.join("data.avro");
    let Some(_) = avro_tool(&["write-file", data.to_str().unwrap(), "200"]) else {
        return;
    };
    let written = avro_tool(&["read-file", input.to_str().unwrap()]).unwrap();
    assert_eq!(written.len(), 200);
    for codec in ["null", "deflate", "snappy", "zstd"] {
        let out = tmp.path().join(format!("out-{codec}"));
        let sql = format!(
            "CREATE TABLE src ({COLUMNS}) WITH ('connector' = 'filesystem', 'path' = '{}', \
             'format' = 'avro');\n\
             CREATE TABLE dst ({COLUMNS}) WITH ('connector' = 'filesystem', 'path' = '{}', \
             'format' = 'avro', 'avro.codec' = '{codec}');\n\
             INSERT INTO dst SELECT * FROM src WHERE id % 7 <> 0;",
            input.display(),
            out.display()
        );
        let s = write_script(tmp.path(), "avro.sql", &sql);
        run_ok(&[s.to_str().unwrap(), "-p", "2"]);
        let read = avro_tool(&["read-file", out.to_str().unwrap()]).unwrap();
        assert_eq!(read, kept(&written), "codec {codec}");
    }
    // A file that is not Avro is named.
    std::fs::write(input.join("bad.avro"), b"not avro at all").unwrap();
    let out = tmp.path().join("bad-out");
    let sql = format!(
        "CREATE TABLE src ({COLUMNS}) WITH ('connector' = 'filesystem', 'path' = '{}', \
         'format' = 'avro');\nSELECT COUNT(*) FROM src;",
        input.display()
    );
    let s = write_script(tmp.path(), "bad.sql", &sql);
    let o = run(&[s.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("bad.avro"), "{err}");
    assert!(!out.exists());
}

/// Avro Kafka messages (one record's binary encoding each, no header): produced by
/// fastavro, read by Weir's source, written by Weir's sink, read back by fastavro.
#[test]
fn avro_kafka_messages_are_read_and_written_as_flink_lays_them_out() {
    let Some(b) = broker() else { return };
    b.create_topic("avro-in", 2);
    b.create_topic("avro-out", 2);
    let Some(_) = avro_tool(&["produce", &b.bootstrap, "avro-in", "150"]) else {
        return;
    };
    let produced = avro_tool(&["read-topic", &b.bootstrap, "avro-in"]).unwrap();
    assert_eq!(produced.len(), 150);
    let tmp = tempfile::tempdir().unwrap();
    let table = |name: &str, topic: &str| {
        format!(
            "CREATE TABLE {name} ({COLUMNS}) WITH ('connector' = 'kafka', 'topic' = '{topic}', \
             'properties.bootstrap.servers' = '{}', 'format' = 'avro', \
             'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset')",
            b.bootstrap
        )
    };
    let sql = format!(
        "{};\n{};\nINSERT INTO dst SELECT * FROM src WHERE id % 7 <> 0;",
        table("src", "avro-in"),
        table("dst", "avro-out")
    );
    let s = write_script(tmp.path(), "avro.sql", &sql);
    run_ok(&[s.to_str().unwrap(), "-p", "2"]);
    let read = avro_tool(&["read-topic", &b.bootstrap, "avro-out"]).unwrap();
    assert_eq!(read, kept(&produced));
}
