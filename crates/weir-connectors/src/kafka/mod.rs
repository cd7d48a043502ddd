//! Flink's `kafka` connector, on librdkafka (the `rdkafka` crate, which builds its bundled
//! librdkafka with the C compiler: no system library needed).
//!
//! Option names are Flink's: `topic` (`;`-separated list) or `topic-pattern`,
//! `properties.*` (passed to the client without the prefix: `properties.bootstrap.servers`,
//! `properties.group.id`, …), `scan.startup.mode`, `scan.bounded.mode`,
//! `scan.topic-partition-discovery.interval`, and the value format as `format` (with its
//! options as `json.*`, `csv.*`, …) or `value.format` (options as `value.json.*`, …).
//!
//! The source ([`source`]) reads each partition as a split whose offset lives in Weir's
//! checkpoints: a restore resumes every partition exactly where the checkpoint was taken,
//! at any parallelism.

/// The options every Kafka table takes, read or written, with `kafka` or `upsert-kafka`
/// (the topic, client properties, key and value formats), then `$extra`.
macro_rules! kafka_options {
    ($($extra:literal),* $(,)?) => {
        &[
            "connector",
            "topic",
            "properties.#",
            "value.format",
            "value.fields-include",
            "key.format",
            "key.fields-prefix",
            "key.json.#",
            "key.csv.#",
            "key.raw.#",
            "key.avro.#",
            "value.json.#",
            "value.csv.#",
            "value.raw.#",
            "value.avro.#",
            $($extra),*
        ]
    };
}

mod decode;
mod keys;
mod positions;
pub mod sink;
pub mod source;

use crate::filesystem::format::Format;
use rdkafka::ClientConfig;
use std::collections::BTreeMap;
use std::time::Duration;
use weir_common::{ConnectorOptions, Error, Result};

/// A consumer whose client-level errors are logged as warnings, except the end-of-partition
/// events the source asks for (`enable.partition.eof`), which are not errors.
pub(crate) type KafkaConsumer = rdkafka::consumer::BaseConsumer<Quiet>;

pub(crate) struct Quiet;

impl rdkafka::ClientContext for Quiet {
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        use rdkafka::types::RDKafkaErrorCode::PartitionEOF;
        if error.rdkafka_error_code() != Some(PartitionEOF) {
            tracing::warn!("Kafka client: {error}: {reason}");
        }
    }
}

impl rdkafka::consumer::ConsumerContext for Quiet {}

/// How long a metadata or offset request may wait for the brokers before the job fails
/// with an error naming them (a broker that is down must not hang the job).
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The formats a Kafka message value can have (one message is one record).
const FORMATS: &[&str] = &[
    "json",
    "csv",
    "raw",
    "avro",
    "debezium-json",
    "canal-json",
    "maxwell-json",
];

pub const SOURCE_OPTIONS: &[&str] = kafka_options!(
    "topic-pattern",
    "format",
    "key.fields",
    "scan.startup.mode",
    "scan.startup.timestamp-millis",
    "scan.startup.specific-offsets",
    "scan.bounded.mode",
    "scan.bounded.timestamp-millis",
    "scan.bounded.specific-offsets",
    "scan.topic-partition-discovery.interval",
    // Format options, checked against the format by `value_format`.
    "json.#",
    "csv.#",
    "raw.#",
    "avro.#",
    "debezium-json.#",
    "canal-json.#",
    "maxwell-json.#",
    "value.debezium-json.#",
    "value.canal-json.#",
    "value.maxwell-json.#",
);

/// The options of an `upsert-kafka` table read: the key is the primary key and the whole
/// topic is read (no startup mode, no `key.fields`).
pub const UPSERT_SOURCE_OPTIONS: &[&str] = kafka_options!(
    "topic-pattern",
    "scan.bounded.mode",
    "scan.bounded.timestamp-millis",
    "scan.bounded.specific-offsets",
    "scan.topic-partition-discovery.interval",
);

/// The value formats of `upsert-kafka`: a value is a whole row (or nothing, a delete).
const UPSERT_VALUE_FORMATS: &[&str] = &["json", "csv", "raw", "avro"];

/// Checks an `upsert-kafka` table's options against its columns and primary key.
pub fn check_upsert(
    options: &ConnectorOptions,
    physical: &arrow::datatypes::SchemaRef,
    primary_key: &[String],
) -> Result<()> {
    value_format(options)?;
    keys::layout(options, physical, Some(primary_key)).map(|_| ())
}

/// The client configuration: every `properties.*` option without its prefix.
pub(crate) fn client_config(options: &ConnectorOptions) -> Result<ClientConfig> {
    options.required("properties.bootstrap.servers")?;
    let mut config = ClientConfig::new();
    for (key, value) in &options.values {
        if let Some(property) = key.strip_prefix("properties.") {
            config.set(property, value);
        }
    }
    // librdkafka logs through its own callback: keep its chatter out of the job's output.
    config.set_log_level(rdkafka::config::RDKafkaLogLevel::Error);
    Ok(config)
}

/// The value format and its options (`format` + `json.*`, or `value.format` +
/// `value.json.*`).
pub fn value_format(options: &ConnectorOptions) -> Result<Format> {
    if options.get("connector") == Some("upsert-kafka") {
        return parse_format(options, "value.format", "value.", UPSERT_VALUE_FORMATS);
    }
    match (options.get("format"), options.get("value.format")) {
        (Some(_), Some(_)) => Err(Error::config(format!(
            "table '{}': set 'format' or 'value.format', not both",
            options.table
        ))),
        (Some(_), None) => parse_format(options, "format", "", FORMATS),
        (None, Some(_)) => parse_format(options, "value.format", "value.", FORMATS),
        (None, None) => Err(Error::config(format!(
            "table '{}': missing required option 'value.format' (or 'format')",
            options.table
        ))),
    }
}

/// The format named by option `name`, one of `allowed`, with its options (`<prefix>json.*`
/// for json, …); an option of another format under `prefix` is an error.
pub(crate) fn parse_format(
    options: &ConnectorOptions,
    name: &str,
    prefix: &str,
    allowed: &[&str],
) -> Result<Format> {
    let table = &options.table;
    let format = options.required(name)?.to_ascii_lowercase();
    if !allowed.contains(&format.as_str()) {
        return Err(Error::config(format!(
            "table '{table}': '{name}' = '{format}' cannot be used for Kafka messages; \
             supported: {}",
            allowed.join(", ")
        )));
    }
    let mut values = BTreeMap::from([("format".to_string(), format.clone())]);
    for (key, value) in &options.values {
        let Some(rest) = key.strip_prefix(prefix) else {
            continue;
        };
        let Some(option) = FORMATS.iter().find_map(|f| {
            rest.strip_prefix(f)
                .and_then(|r| r.strip_prefix('.'))
                .map(|_| f)
        }) else {
            continue;
        };
        let known = crate::filesystem::SOURCE_OPTIONS.contains(&rest);
        if *option != format || !known {
            return Err(Error::config(format!(
                "table '{table}': option '{key}' does not belong to {name} '{format}'"
            )));
        }
        values.insert(rest.to_string(), value.clone());
    }
    Format::from_options(&ConnectorOptions::new(table.clone(), values))
}

/// Which subtask reads a partition: partitions of one topic are spread round-robin from a
/// start that depends on the topic (as Flink's `KafkaSourceEnumerator`), so that a restore
/// at another parallelism and a newly discovered partition agree on an owner.
pub(crate) fn owner(topic: &str, partition: i32, parallelism: usize) -> usize {
    let p = parallelism.max(1) as u64;
    ((weir_common::fnv32(topic) as u64 % p + partition as u64) % p) as usize
}

/// The brokers named in an error, so the user sees which servers were tried.
pub(crate) fn brokers(options: &ConnectorOptions) -> &str {
    options
        .get("properties.bootstrap.servers")
        .unwrap_or_default()
}
