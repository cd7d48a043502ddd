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
//! - `exactly-once` — transactions per checkpoint: not built yet, refused with that reason.
//!
//! A delivery that fails (the broker refused the record, or it could not be delivered
//! within `properties.delivery.timeout.ms`) fails the job with the topic and the error.

use crate::filesystem::format::{Format, PartEncoder};
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use async_trait::async_trait;
use rdkafka::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_common::{ConnectorOptions, Error, Result};
use weir_runtime::{Operator, OperatorFactory, Output, TaskInfo};

pub const SINK_OPTIONS: &[&str] = &[
    "connector",
    "topic",
    "properties.#",
    "format",
    "value.format",
    "sink.delivery-guarantee",
    "sink.partitioner",
    "sink.transactional-id-prefix",
    "json.#",
    "csv.#",
    "raw.#",
    "debezium-json.#",
    "value.json.#",
    "value.csv.#",
    "value.raw.#",
    "value.debezium-json.#",
];

/// How long a flush at a checkpoint may wait for the broker's acknowledgements.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Guarantee {
    None,
    AtLeastOnce,
}

/// `sink.partitioner`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Partitioner {
    /// librdkafka's own (messages have no key: spread by the client).
    Default,
    /// Subtask `i` writes to partition `i mod partitions`.
    Fixed,
    RoundRobin,
}

pub struct KafkaSinkFactory {
    table: String,
    topic: String,
    brokers: String,
    config: rdkafka::ClientConfig,
    format: Format,
    schema: SchemaRef,
    guarantee: Guarantee,
    partitioner: Partitioner,
}

impl KafkaSinkFactory {
    pub fn try_new(options: &ConnectorOptions, schema: SchemaRef) -> Result<Self> {
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
            Some("exactly-once") => {
                return Err(Error::config(format!(
                    "table '{table}': 'sink.delivery-guarantee' = 'exactly-once' is not \
                     available yet (Kafka transactions per checkpoint); use 'at-least-once'"
                )));
            }
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
        // Checks that the format can be written (canal/maxwell cannot).
        PartEncoder::new(&format, &schema)?;
        Ok(Self {
            table,
            topic: topic.to_string(),
            brokers: super::brokers(options).to_string(),
            config: super::client_config(options)?,
            format,
            schema,
            guarantee,
            partitioner,
        })
    }
}

/// Keeps the first delivery failure for the operator to report.
struct Deliveries {
    failed: Arc<Mutex<Option<String>>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            failed.get_or_insert_with(|| e.to_string());
        }
    }
}

impl OperatorFactory for KafkaSinkFactory {
    fn name(&self) -> String {
        format!("Sink: kafka({})", self.topic)
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let failed = Arc::new(Mutex::new(None));
        let producer: ThreadedProducer<Deliveries> = self
            .config
            .create_with_context(Deliveries {
                failed: failed.clone(),
            })
            .map_err(|e| {
                Error::config(format!(
                    "table '{}': cannot create a Kafka producer: {e}",
                    self.table
                ))
            })?;
        Ok(Box::new(KafkaSink {
            table: self.table.clone(),
            topic: self.topic.clone(),
            brokers: self.brokers.clone(),
            format: self.format.clone(),
            schema: self.schema.clone(),
            guarantee: self.guarantee,
            partitioner: self.partitioner,
            subtask: task.subtask,
            partitions: None,
            next: task.subtask,
            producer: Arc::new(producer),
            failed,
        }))
    }

    fn is_sink(&self) -> bool {
        true
    }
}

struct KafkaSink {
    table: String,
    topic: String,
    brokers: String,
    format: Format,
    schema: SchemaRef,
    guarantee: Guarantee,
    partitioner: Partitioner,
    subtask: usize,
    /// The topic's partition count (for `fixed` and `round-robin`), looked up once.
    partitions: Option<i32>,
    /// The next round-robin partition.
    next: usize,
    producer: Arc<ThreadedProducer<Deliveries>>,
    failed: Arc<Mutex<Option<String>>>,
}

impl KafkaSink {
    fn check_deliveries(&self) -> Result<()> {
        let failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        match &*failed {
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

    async fn partition_count(&mut self) -> Result<i32> {
        if let Some(n) = self.partitions {
            return Ok(n);
        }
        let producer = self.producer.clone();
        let topic = self.topic.clone();
        let metadata = tokio::task::spawn_blocking(move || {
            producer
                .client()
                .fetch_metadata(Some(&topic), super::REQUEST_TIMEOUT)
        })
        .await
        .map_err(|e| Error::internal(format!("Kafka metadata call panicked: {e}")))?
        .map_err(|e| {
            Error::external(format!(
                "table '{}': reading the metadata of topic '{}' from the Kafka brokers '{}' \
                 failed: {e}",
                self.table, self.topic, self.brokers
            ))
        })?;
        let n = metadata
            .topics()
            .iter()
            .find(|t| t.name() == self.topic && t.error().is_none())
            .map_or(0, |t| t.partitions().len() as i32);
        if n == 0 {
            return Err(Error::input(format!(
                "table '{}': Kafka topic '{}' does not exist on the brokers '{}'",
                self.table, self.topic, self.brokers
            )));
        }
        self.partitions = Some(n);
        Ok(n)
    }

    /// One encoded value per row.
    fn encode(&self, batch: &RecordBatch) -> Result<Vec<Option<Vec<u8>>>> {
        let rows = batch.num_rows();
        if matches!(self.format, Format::Raw) {
            let column = batch.column(0);
            return Ok((0..rows)
                .map(|i| {
                    (!column.is_null(i)).then(|| match column.data_type() {
                        DataType::Utf8 => column.as_string::<i32>().value(i).as_bytes().to_vec(),
                        _ => column.as_binary::<i32>().value(i).to_vec(),
                    })
                })
                .collect());
        }
        // The text encoders write one line per row unless a csv field holds a newline;
        // then each row is encoded alone.
        let mut encoder = PartEncoder::new(&self.format, &self.schema)?;
        encoder.write(batch)?;
        let text = encoder.finish()?;
        let lines: Vec<&[u8]> = text
            .strip_suffix(b"\n")
            .unwrap_or(&text)
            .split(|b| *b == b'\n')
            .collect();
        if lines.len() == rows || rows == 0 {
            return Ok(lines
                .into_iter()
                .take(rows)
                .map(|l| Some(l.to_vec()))
                .collect());
        }
        (0..rows)
            .map(|i| {
                let mut encoder = PartEncoder::new(&self.format, &self.schema)?;
                encoder.write(&batch.slice(i, 1))?;
                let mut one = encoder.finish()?;
                if one.last() == Some(&b'\n') {
                    one.pop();
                }
                Ok(Some(one))
            })
            .collect()
    }
}

#[async_trait]
impl Operator for KafkaSink {
    async fn process_batch(&mut self, _: usize, batch: RecordBatch, _: &mut Output) -> Result<()> {
        self.check_deliveries()?;
        let partitions = match self.partitioner {
            Partitioner::Default => None,
            _ => Some(self.partition_count().await?),
        };
        let values = self.encode(&batch)?;
        for value in &values {
            let partition = match (self.partitioner, partitions) {
                (Partitioner::Fixed, Some(n)) => Some(self.subtask as i32 % n),
                (Partitioner::RoundRobin, Some(n)) => {
                    self.next += 1;
                    Some(self.next as i32 % n)
                }
                _ => None,
            };
            loop {
                let mut record = BaseRecord::<(), [u8]>::to(&self.topic);
                if let Some(v) = value {
                    record = record.payload(v.as_slice());
                }
                if let Some(p) = partition {
                    record = record.partition(p);
                }
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                        // librdkafka's queue is full: let it drain.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        self.check_deliveries()?;
                    }
                    Err((e, _)) => {
                        return Err(Error::external(format!(
                            "table '{}': cannot write to Kafka topic '{}': {e}",
                            self.table, self.topic
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    async fn prepare_snapshot_pre_barrier(
        &mut self,
        _: weir_common::CheckpointId,
        _: &mut Output,
    ) -> Result<()> {
        match self.guarantee {
            Guarantee::AtLeastOnce => self.flush().await,
            Guarantee::None => self.check_deliveries(),
        }
    }

    async fn close(&mut self) -> Result<()> {
        self.flush().await
    }
}
