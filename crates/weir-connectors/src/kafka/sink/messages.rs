//! Rows to Kafka messages: each row's value in the value format, the partition
//! `sink.partitioner` picks, and the producer that sends them.
//!
//! The exactly-once sink also keeps messages as bytes (its write-ahead log inside the
//! checkpoint): [`append`] and [`decode`] are that encoding — per message a partition, a key
//! and a value, each length-prefixed (little-endian `i32`, `-1` for none).

use crate::filesystem::format::{Format, PartEncoder};
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use rdkafka::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use std::sync::{Arc, Mutex};
use weir_common::changelog::RowKind;
use weir_common::{Error, Result};

/// A producer whose failed deliveries are kept for the sink to report.
pub(super) type KafkaProducer = ThreadedProducer<Deliveries>;

/// A producer with the slot its first delivery failure is kept in.
pub(super) type Handle = (Arc<KafkaProducer>, Arc<Mutex<Option<String>>>);

/// Keeps the first delivery failure.
pub(super) struct Deliveries {
    pub failed: Arc<Mutex<Option<String>>>,
}

impl Deliveries {
    /// The first delivery failure so far, if any.
    pub fn first_failure(failed: &Mutex<Option<String>>) -> Option<String> {
        failed.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
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

/// `sink.partitioner`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Partitioner {
    /// librdkafka's own (messages have no key: spread by the client).
    Default,
    /// Subtask `i` writes to partition `i mod partitions`.
    Fixed,
    RoundRobin,
}

/// One message to send.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Message {
    /// `None`: the producer's partitioner picks.
    pub partition: Option<i32>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

/// Encodes one subtask's rows as messages.
pub(super) struct Messages {
    pub table: String,
    pub topic: String,
    pub brokers: String,
    pub format: Format,
    pub schema: SchemaRef,
    /// Which columns the key and the value hold.
    pub layout: crate::kafka::keys::Layout,
    /// `upsert-kafka`: rows are upserts and deletes by key.
    pub upsert: bool,
    pub partitioner: Partitioner,
    pub subtask: usize,
    /// The topic's partition count (for `fixed` and `round-robin`), looked up once.
    pub partitions: Option<i32>,
    /// The next round-robin partition.
    pub next: usize,
}

impl Messages {
    /// One message per row of `batch`; `client` looks up the partition count if needed.
    pub async fn encode(
        &mut self,
        batch: &RecordBatch,
        client: &Arc<KafkaProducer>,
    ) -> Result<Vec<Message>> {
        let partitions = match self.partitioner {
            Partitioner::Default => None,
            _ => Some(self.partition_count(client).await?),
        };
        // `upsert-kafka`: `+I`/`+U` rows are upserts, `-D` rows deletes (a message without a
        // value), `-U` rows are left out (the `+U` that follows replaces the row).
        let (batch, kinds) = match self.upsert {
            true => match weir_common::changelog::split(batch) {
                (data, Some(ops)) => (data, Some(ops)),
                (data, None) => (data, None),
            },
            false => (batch.clone(), None),
        };
        let batch = &batch;
        let values = match self.layout.value_is_whole(&self.schema) {
            true => encode_rows(&self.format, &self.schema, batch)?,
            false => {
                // The value columns, and the row kinds a changelog format writes.
                let mut columns = self.layout.value_fields.clone();
                if weir_common::changelog::is_changelog(batch) {
                    columns.push(batch.num_columns() - 1);
                }
                let value = batch.project(&columns)?;
                encode_rows(&self.format, &self.layout.value_schema, &value)?
            }
        };
        let mut keys = match &self.layout.key {
            None => None,
            Some(key) => {
                let columns = key.fields.iter().map(|i| batch.column(*i).clone());
                let keys = RecordBatch::try_new(key.schema.clone(), columns.collect())?;
                Some(encode_rows(&key.format, &key.schema, &keys)?.into_iter())
            }
        };
        let kind = |i: usize| kinds.as_ref().map(|k| RowKind::from_i8(k.value(i)));
        Ok(values
            .into_iter()
            .enumerate()
            .filter_map(|(i, value)| {
                let key = keys.as_mut().and_then(|k| k.next().flatten());
                let value = match kind(i) {
                    Some(RowKind::UpdateBefore) => return None,
                    Some(RowKind::Delete) => None,
                    _ => value,
                };
                let partition = match (self.partitioner, partitions) {
                    (Partitioner::Fixed, Some(n)) => Some(self.subtask as i32 % n),
                    (Partitioner::RoundRobin, Some(n)) => {
                        self.next += 1;
                        Some(self.next as i32 % n)
                    }
                    _ => None,
                };
                Some(Message {
                    partition,
                    key,
                    value,
                })
            })
            .collect())
    }

    async fn partition_count(&mut self, client: &Arc<KafkaProducer>) -> Result<i32> {
        if let Some(n) = self.partitions {
            return Ok(n);
        }
        let producer = client.clone();
        let topic = self.topic.clone();
        let metadata = tokio::task::spawn_blocking(move || {
            producer
                .client()
                .fetch_metadata(Some(&topic), super::super::REQUEST_TIMEOUT)
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
}

/// One encoded message part (key or value) per row of `batch`, whose columns `schema`
/// names (a changelog batch also has its row kinds).
fn encode_rows(
    format: &Format,
    schema: &SchemaRef,
    batch: &RecordBatch,
) -> Result<Vec<Option<Vec<u8>>>> {
    let rows = batch.num_rows();
    if matches!(format, Format::Raw) {
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
    let mut encoder = PartEncoder::new(format, schema)?;
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
            let mut encoder = PartEncoder::new(format, schema)?;
            encoder.write(&batch.slice(i, 1))?;
            let mut one = encoder.finish()?;
            if one.last() == Some(&b'\n') {
                one.pop();
            }
            Ok(Some(one))
        })
        .collect()
}

/// Hands `message` to the producer's queue; `Ok(false)` when the queue is full (wait for
/// it to drain and send again).
pub(super) fn send(producer: &KafkaProducer, topic: &str, message: &Message) -> Result<bool> {
    let mut record = BaseRecord::<[u8], [u8]>::to(topic);
    if let Some(v) = &message.value {
        record = record.payload(v.as_slice());
    }
    if let Some(k) = &message.key {
        record = record.key(k.as_slice());
    }
    if let Some(p) = message.partition {
        record = record.partition(p);
    }
    match producer.send(record) {
        Ok(()) => Ok(true),
        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => Ok(false),
        Err((e, _)) => Err(Error::external(format!(
            "cannot write to Kafka topic '{topic}': {e}"
        ))),
    }
}

/// Appends `message` to a write-ahead buffer.
pub(super) fn append(buffer: &mut Vec<u8>, message: &Message) {
    buffer.extend_from_slice(&message.partition.unwrap_or(-1).to_le_bytes());
    for part in [&message.key, &message.value] {
        match part {
            None => buffer.extend_from_slice(&(-1i32).to_le_bytes()),
            Some(bytes) => {
                buffer.extend_from_slice(&(bytes.len() as i32).to_le_bytes());
                buffer.extend_from_slice(bytes);
            }
        }
    }
}

/// The messages of a write-ahead buffer, in the order they were appended.
pub(super) fn decode(mut bytes: &[u8]) -> Result<Vec<Message>> {
    fn int(bytes: &mut &[u8]) -> Result<i32> {
        let (head, rest) = bytes
            .split_first_chunk::<4>()
            .ok_or_else(|| corrupt("a length is cut short"))?;
        *bytes = rest;
        Ok(i32::from_le_bytes(*head))
    }
    fn part(bytes: &mut &[u8]) -> Result<Option<Vec<u8>>> {
        let len = int(bytes)?;
        if len < 0 {
            return Ok(None);
        }
        let len = len as usize;
        if bytes.len() < len {
            return Err(corrupt("a message is cut short"));
        }
        let (head, rest) = bytes.split_at(len);
        *bytes = rest;
        Ok(Some(head.to_vec()))
    }
    fn corrupt(what: &str) -> Error {
        Error::Checkpoint(format!(
            "corrupt Kafka sink state: {what} in the messages kept for a transaction"
        ))
    }
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let partition = int(&mut bytes)?;
        let key = part(&mut bytes)?;
        let value = part(&mut bytes)?;
        out.push(Message {
            partition: (partition >= 0).then_some(partition),
            key,
            value,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_ahead_encoding_round_trips_and_rejects_truncation() {
        let messages = vec![
            Message {
                partition: Some(2),
                key: Some(b"k".to_vec()),
                value: Some(b"{\"a\":1}".to_vec()),
            },
            Message {
                partition: None,
                key: None,
                value: None,
            },
            Message {
                partition: Some(0),
                key: Some(Vec::new()),
                value: Some(Vec::new()),
            },
        ];
        let mut buffer = Vec::new();
        messages.iter().for_each(|m| append(&mut buffer, m));
        assert_eq!(decode(&buffer).unwrap(), messages);
        let err = decode(&buffer[..buffer.len() - 1]).unwrap_err().to_string();
        assert!(err.contains("corrupt Kafka sink state"), "{err}");
    }
}
