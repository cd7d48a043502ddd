//! The `kafka` sink: one librdkafka producer per subtask, one message per row (the value
//! format encodes the row).
//!
//! `sink.delivery-guarantee` (Flink's key and default):
//! - `at-least-once` — before each checkpoint barrier (and so before the final
//!   checkpoint of a bounded job) the producer is flushed and every delivery must have
//!   been acknowledged: a completed checkpoint never covers a row the broker has not
//!   stored. After a crash, rows written since the last completed checkpoint are written
//!   again (duplicates, never losses).
//! - `none` — nothing is waited for at checkpoints (the producer is flushed when the job
//!   ends).
//! - `exactly-once` — one Kafka transaction per subtask and checkpoint, committed when
//!   the checkpoint completes ([`transactional`]).
//!
//! A delivery that fails (the broker refused the record, or it could not be delivered
//! within `properties.delivery.timeout.ms`) fails the job with the topic and the error.

mod messages;
mod transactional;

use crate::filesystem::avro::AvroLayout;
use crate::filesystem::format::{Format, PartEncoder};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use messages::{Deliveries, Handle, KafkaProducer, Messages, Partitioner};
use rdkafka::ClientConfig;
use rdkafka::producer::Producer;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_common::{ConnectorOptions, Error, Result};
use weir_runtime::{Operator, OperatorFactory, Output, TaskInfo};

pub const SINK_OPTIONS: &[&str] = kafka_options!(
    "format",
    "key.fields",
    "sink.delivery-guarantee",
    "sink.partitioner",
    "sink.transactional-id-prefix",
    "json.#",
    "csv.#",
    "raw.#",
    "avro.#",
    "debezium-json.#",
    "canal-json.#",
    "value.debezium-json.#",
    "value.canal-json.#",
);

/// The options of an `upsert-kafka` table written: the key is the primary key, placed by
/// its hash.
pub const UPSERT_SINK_OPTIONS: &[&str] =
    kafka_options!("sink.delivery-guarantee", "sink.transactional-id-prefix");

/// The metadata a Kafka sink writes (non-`VIRTUAL` metadata columns): the message's
/// timestamp and headers, as in Flink.
pub const WRITABLE_METADATA: &[&str] = &["timestamp", "headers"];

/// How long a flush at a checkpoint may wait for the broker's acknowledgements.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq)]
enum Guarantee {
    None,
    AtLeastOnce,
    /// Transactional ids are `<prefix>-<subtask>`.
    ExactlyOnce {
        prefix: String,
    },
}

pub struct KafkaSinkFactory {
    table: String,
    topic: String,
    brokers: String,
    config: ClientConfig,
    format: Format,
    schema: SchemaRef,
    layout: crate::kafka::keys::Layout,
    written: messages::WrittenMetadata,
    upsert: bool,
    guarantee: Guarantee,
    partitioner: Partitioner,
}

impl KafkaSinkFactory {
    /// A `kafka` sink, or with `primary_key` an `upsert-kafka` one.
    pub fn try_new(
        options: &ConnectorOptions,
        schema: SchemaRef,
        metadata: &[(String, String)],
        primary_key: Option<&[String]>,
    ) -> Result<Self> {
        let table = options.table.clone();
        let topic = options.required("topic")?;
        if topic.contains(';') {
            return Err(Error::config(format!(
                "table '{table}': a Kafka sink writes to one 'topic', got '{topic}'"
            )));
        }
        let guarantee = match options
            .get("sink.delivery-guarantee")
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("at-least-once") => Guarantee::AtLeastOnce,
            Some("none") => Guarantee::None,
            Some("exactly-once") => Guarantee::ExactlyOnce {
                prefix: transactional::id_prefix(options)?,
            },
            Some(other) => {
                return Err(Error::config(format!(
                    "table '{table}': invalid 'sink.delivery-guarantee' '{other}'; expected \
                     one of: none, at-least-once, exactly-once"
                )));
            }
        };
        let partitioner = match options
            .get("sink.partitioner")
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("default") => Partitioner::Default,
            Some("fixed") => Partitioner::Fixed,
            Some("round-robin") => Partitioner::RoundRobin,
            Some(other) => {
                return Err(Error::config(format!(
                    "table '{table}': invalid 'sink.partitioner' '{other}'; expected one of: \
                     default, fixed, round-robin"
                )));
            }
        };
        let format = super::value_format(options)?;
        // The metadata columns set the message's timestamp and headers; the others are
        // the data the key and value hold.
        let metadata = crate::metadata::resolve(
            options,
            "kafka",
            &schema,
            metadata,
            WRITABLE_METADATA,
            |key| WRITABLE_METADATA.iter().position(|k| *k == key),
        )?;
        let column_of = |which: usize| metadata.iter().find(|(_, k)| *k == which).map(|(c, _)| *c);
        let written = messages::WrittenMetadata {
            timestamp: column_of(0),
            headers: column_of(1),
            physical: (0..schema.fields().len())
                .filter(|c| !metadata.iter().any(|(m, _)| m == c))
                .collect(),
        };
        let schema = crate::metadata::physical_schema(&schema, &metadata);
        let layout = super::keys::layout(options, &schema, primary_key)?;
        // Checks that the formats can be written (maxwell-json cannot).
        PartEncoder::new(&format, &layout.value_schema)?;
        if let Some(key) = &layout.key {
            PartEncoder::new(&key.format, &key.schema)?;
        }
        let mut config = super::client_config(options)?;
        if options.get("properties.partitioner").is_none() {
            // Kafka's Java client places keyed messages by the murmur2 hash of the key, as
            // Flink's sink does: so does this one (librdkafka's default is crc32).
            config.set("partitioner", "murmur2_random");
        }
        if options
            .get("properties.queue.buffering.max.kbytes")
            .is_none()
        {
            // librdkafka queues up to 1 GB of messages before a send is refused; the
            // exactly-once sink hands it a whole checkpoint's messages at once, so that
            // queue, not the broker, would hold them (at 10 s checkpoints a job's RSS grew
            // by ~0.8 GB). A refused send waits for the queue to drain instead.
            config.set("queue.buffering.max.kbytes", QUEUE_KBYTES.to_string());
        }
        Ok(Self {
            table,
            topic: topic.to_string(),
            brokers: super::brokers(options).to_string(),
            config,
            format,
            schema,
            layout,
            written,
            upsert: primary_key.is_some(),
            guarantee,
            partitioner,
        })
    }

    fn messages(&self, task: &TaskInfo) -> Result<Messages> {
        let avro = |format: &Format, schema: &SchemaRef| -> Result<Option<AvroLayout>> {
            match format {
                Format::Avro(_) => Ok(Some(AvroLayout::new(schema)?)),
                _ => Ok(None),
            }
        };
        Ok(Messages {
            value_avro: avro(&self.format, &self.layout.value_schema)?,
            key_avro: self.layout.key.as_ref().and_then(|k| k.avro.clone()),
            table: self.table.clone(),
            topic: self.topic.clone(),
            brokers: self.brokers.clone(),
            format: self.format.clone(),
            schema: self.schema.clone(),
            layout: self.layout.clone(),
            written: self.written.clone(),
            upsert: self.upsert,
            partitioner: self.partitioner,
            subtask: task.subtask,
            partitions: None,
            next: task.subtask,
        })
    }
}

/// The most message bytes a producer queues before sends wait (librdkafka's
/// `queue.buffering.max.kbytes`, unless set): 64 MiB, enough for librdkafka to batch.
const QUEUE_KBYTES: usize = 64 * 1024;

/// A producer with `config`, and where its failed deliveries are kept.
fn producer(table: &str, config: &ClientConfig) -> Result<Handle> {
    let failed = Arc::new(Mutex::new(None));
    let producer: KafkaProducer = config
        .create_with_context(Deliveries {
            failed: failed.clone(),
        })
        .map_err(|e| {
            Error::config(format!(
                "table '{table}': cannot create a Kafka producer: {e}"
            ))
        })?;
    Ok((Arc::new(producer), failed))
}

impl OperatorFactory for KafkaSinkFactory {
    fn name(&self) -> String {
        format!("Sink: kafka({})", self.topic)
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        if let Guarantee::ExactlyOnce { prefix } = &self.guarantee {
            return Ok(Box::new(transactional::ExactlyOnceSink::new(
                transactional::Transactions {
                    table: self.table.clone(),
                    topic: self.topic.clone(),
                    brokers: self.brokers.clone(),
                    config: self.config.clone(),
                    prefix: prefix.clone(),
                    groups: Default::default(),
                },
                self.messages(task)?,
                task.clone(),
            )?));
        }
        let (producer, failed) = producer(&self.table, &self.config)?;
        Ok(Box::new(KafkaSink {
            table: self.table.clone(),
            topic: self.topic.clone(),
            brokers: self.brokers.clone(),
            flush_at_checkpoints: self.guarantee == Guarantee::AtLeastOnce,
            messages: self.messages(task)?,
            producer,
            failed,
        }))
    }

    fn is_sink(&self) -> bool {
        true
    }
}

/// The `none` and `at-least-once` sink: messages go to the broker as they come.
struct KafkaSink {
    table: String,
    topic: String,
    brokers: String,
    flush_at_checkpoints: bool,
    messages: Messages,
    producer: Arc<KafkaProducer>,
    failed: Arc<Mutex<Option<String>>>,
}

impl KafkaSink {
    fn check_deliveries(&self) -> Result<()> {
        match Deliveries::first_failure(&self.failed) {
            None => Ok(()),
            Some(e) => Err(Error::external(format!(
                "table '{}': writing to Kafka topic '{}' on the brokers '{}' failed: {e}",
                self.table, self.topic, self.brokers
            ))),
        }
    }

    /// Waits until the broker acknowledged everything sent.
    async fn flush(&self) -> Result<()> {
        let producer = self.producer.clone();
        let flushed = tokio::task::spawn_blocking(move || producer.flush(FLUSH_TIMEOUT))
            .await
            .map_err(|e| Error::internal(format!("Kafka flush panicked: {e}")))?;
        self.check_deliveries()?;
        flushed.map_err(|e| {
            Error::external(format!(
                "table '{}': Kafka topic '{}' on the brokers '{}' did not acknowledge the \
                 rows written before a checkpoint within {FLUSH_TIMEOUT:?}: {e}",
                self.table, self.topic, self.brokers
            ))
        })
    }
}

#[async_trait]
impl Operator for KafkaSink {
    async fn process_batch(&mut self, _: usize, batch: RecordBatch, _: &mut Output) -> Result<()> {
        self.check_deliveries()?;
        for message in self.messages.encode(&batch, &self.producer).await? {
            while !messages::send(&self.producer, &self.topic, &message)
                .map_err(|e| Error::external(format!("table '{}': {e}", self.table)))?
            {
                // librdkafka's queue is full: let it drain.
                tokio::time::sleep(Duration::from_millis(5)).await;
                self.check_deliveries()?;
            }
        }
        Ok(())
    }

    async fn prepare_snapshot_pre_barrier(
        &mut self,
        _: weir_common::CheckpointId,
        _: &mut Output,
    ) -> Result<()> {
        match self.flush_at_checkpoints {
            true => self.flush().await,
            false => self.check_deliveries(),
        }
    }

    async fn close(&mut self) -> Result<()> {
        self.flush().await
    }
}
