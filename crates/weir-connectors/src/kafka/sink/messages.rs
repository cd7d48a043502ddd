//! Rows to Kafka messages: each row's value in the value format, the partition
//! `sink.partitioner` picks, and the producer that sends them.
//!
//! The exactly-once sink also keeps messages as bytes (its write-ahead log inside the
//! checkpoint): [`append`] and [`decode`] are that encoding — per message a partition, a key
//! and a value, each length-prefixed (little-endian `i32`, `-1` for none).

use crate::filesystem::avro::AvroLayout;
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

/// A message's headers: names and values, in order (a name may repeat).
pub(super) type MessageHeaders = Vec<(String, Option<Vec<u8>>)>;

/// One message to send.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Message {
    /// `None`: the producer's partitioner picks.
    pub partition: Option<i32>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    /// Milliseconds since the epoch; `None`: the producer's clock.
    pub timestamp: Option<i64>,
    pub headers: MessageHeaders,
}

/// Where the written metadata columns are in the sink's rows.
#[derive(Debug, Clone)]
pub(super) struct WrittenMetadata {
    pub timestamp: Option<usize>,
    pub headers: Option<usize>,
    /// The other columns: the data the key and value hold.
    pub physical: Vec<usize>,
}

impl WrittenMetadata {
    fn any(&self) -> bool {
        self.timestamp.is_some() || self.headers.is_some()
    }

    /// The message timestamps of `batch`'s rows.
    fn timestamps(&self, batch: &RecordBatch) -> Result<Vec<Option<i64>>> {
        let Some(c) = self.timestamp else {
            return Ok(vec![None; batch.num_rows()]);
        };
        let ms = arrow::compute::cast(
            batch.column(c),
            &DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, None),
        )?;
        let ms = arrow::compute::cast(&ms, &DataType::Int64)?;
        Ok(ms
            .as_primitive::<arrow::datatypes::Int64Type>()
            .iter()
            .collect())
    }

    /// The message headers of `batch`'s rows (a `MAP<STRING, BYTES>` column).
    fn headers(&self, batch: &RecordBatch) -> Result<Vec<MessageHeaders>> {
        let Some(c) = self.headers else {
            return Ok(vec![Vec::new(); batch.num_rows()]);
        };
        let map = batch.column(c).as_map_opt().ok_or_else(|| {
            Error::config(format!(
                "the 'headers' metadata column must be MAP<STRING, BYTES>, not {}",
                batch.column(c).data_type()
            ))
        })?;
        let keys = arrow::compute::cast(map.keys(), &DataType::Utf8)?;
        let values = arrow::compute::cast(map.values(), &DataType::Binary)?;
        let (keys, values) = (keys.as_string::<i32>(), values.as_binary::<i32>());
        let offsets = map.value_offsets();
        Ok((0..batch.num_rows())
            .map(|row| {
                if map.is_null(row) {
                    return Vec::new();
                }
                (offsets[row] as usize..offsets[row + 1] as usize)
                    .map(|e| {
                        let value = (!values.is_null(e)).then(|| values.value(e).to_vec());
                        (keys.value(e).to_string(), value)
                    })
                    .collect()
            })
            .collect())
    }
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
    /// Which columns set the messages' timestamp and headers.
    pub written: WrittenMetadata,
    /// The Avro layouts of the value and the key, when their format is `avro`.
    pub value_avro: Option<AvroLayout>,
    pub key_avro: Option<AvroLayout>,
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
            true => weir_common::changelog::split(batch),
            false => (batch.clone(), None),
        };
        let (timestamps, headers) = (
            self.written.timestamps(&batch)?,
            self.written.headers(&batch)?,
        );
        let batch = match self.written.any() {
            true => {
                let mut columns = self.written.physical.clone();
                if weir_common::changelog::is_changelog(&batch) {
                    columns.push(batch.num_columns() - 1);
                }
                batch.project(&columns)?
            }
            false => batch,
        };
        let batch = &batch;
        let values = match self.layout.value_is_whole(&self.schema) {
            true => encode_rows(&self.format, &self.schema, batch, self.value_avro.as_ref())?,
            false => {
                // The value columns, and the row kinds a changelog format writes.
                let mut columns = self.layout.value_fields.clone();
                if weir_common::changelog::is_changelog(batch) {
                    columns.push(batch.num_columns() - 1);
                }
                let value = batch.project(&columns)?;
                let (data, _) = weir_common::changelog::split(&value);
                let value = match self.value_avro.is_some() {
                    true => data,
                    false => value,
                };
                encode_rows(
                    &self.format,
                    &self.layout.value_schema,
                    &value,
                    self.value_avro.as_ref(),
                )?
            }
        };
        let mut keys = match &self.layout.key {
            None => None,
            Some(key) => {
                let columns = key.fields.iter().map(|i| batch.column(*i).clone());
                let keys = RecordBatch::try_new(key.schema.clone(), columns.collect())?;
                Some(
                    encode_rows(&key.format, &key.schema, &keys, self.key_avro.as_ref())?
                        .into_iter(),
                )
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
                    timestamp: timestamps[i],
                    headers: headers[i].clone(),
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
    avro: Option<&AvroLayout>,
) -> Result<Vec<Option<Vec<u8>>>> {
    let rows = batch.num_rows();
    if let Some(avro) = avro {
        return Ok(avro.encode_records(batch)?.into_iter().map(Some).collect());
    }
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
    if let Some(t) = message.timestamp {
        record = record.timestamp(t);
    }
    if !message.headers.is_empty() {
        let mut headers = rdkafka::message::OwnedHeaders::new_with_capacity(message.headers.len());
        for (key, value) in &message.headers {
            headers = headers.insert(rdkafka::message::Header {
                key,
                value: value.as_deref(),
            });
        }
        record = record.headers(headers);
    }
    match producer.send(record) {
        Ok(()) => Ok(true),
        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => Ok(false),
        Err((e, _)) => Err(Error::external(format!(
            "cannot write to Kafka topic '{topic}': {e}"
        ))),
    }
}

/// The write-ahead encoding's version, the first byte of every buffer.
const WRITE_AHEAD_VERSION: u8 = 1;

/// Appends `message` to a write-ahead buffer: partition (`-1`: none), key and value
/// (length-prefixed, `-1`: none), timestamp (`i64::MIN`: none), then the number of
/// headers and each header's name and value, all little-endian.
pub(super) fn append(buffer: &mut Vec<u8>, message: &Message) {
    if buffer.is_empty() {
        buffer.push(WRITE_AHEAD_VERSION);
    }
    let bytes = |buffer: &mut Vec<u8>, part: Option<&[u8]>| match part {
        None => buffer.extend_from_slice(&(-1i32).to_le_bytes()),
        Some(bytes) => {
            buffer.extend_from_slice(&(bytes.len() as i32).to_le_bytes());
            buffer.extend_from_slice(bytes);
        }
    };
    buffer.extend_from_slice(&message.partition.unwrap_or(-1).to_le_bytes());
    bytes(buffer, message.key.as_deref());
    bytes(buffer, message.value.as_deref());
    buffer.extend_from_slice(&message.timestamp.unwrap_or(i64::MIN).to_le_bytes());
    buffer.extend_from_slice(&(message.headers.len() as i32).to_le_bytes());
    for (name, value) in &message.headers {
        bytes(buffer, Some(name.as_bytes()));
        bytes(buffer, value.as_deref());
    }
}

/// The messages of a write-ahead buffer, in the order they were appended.
pub(super) fn decode(bytes: &[u8]) -> Result<Vec<Message>> {
    fn corrupt(what: &str) -> Error {
        Error::Checkpoint(format!(
            "corrupt Kafka sink state: {what} in the messages kept for a transaction"
        ))
    }
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
        if bytes.len() < n {
            return Err(corrupt("a message is cut short"));
        }
        let (head, rest) = bytes.split_at(n);
        *bytes = rest;
        Ok(head)
    }
    fn int(bytes: &mut &[u8]) -> Result<i32> {
        Ok(i32::from_le_bytes(
            take(bytes, 4)?.try_into().expect("4 bytes"),
        ))
    }
    fn part(bytes: &mut &[u8]) -> Result<Option<Vec<u8>>> {
        let len = int(bytes)?;
        if len < 0 {
            return Ok(None);
        }
        Ok(Some(take(bytes, len as usize)?.to_vec()))
    }
    let Some((&version, mut bytes)) = bytes.split_first() else {
        return Ok(Vec::new());
    };
    if version != WRITE_AHEAD_VERSION {
        return Err(corrupt(&format!("unknown version {version}")));
    }
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let partition = int(&mut bytes)?;
        let key = part(&mut bytes)?;
        let value = part(&mut bytes)?;
        let timestamp = i64::from_le_bytes(take(&mut bytes, 8)?.try_into().expect("8 bytes"));
        let mut headers = Vec::new();
        for _ in 0..int(&mut bytes)? {
            let name = part(&mut bytes)?.ok_or_else(|| corrupt("a header has no name"))?;
            let name =
                String::from_utf8(name).map_err(|_| corrupt("a header name is not UTF-8"))?;
            headers.push((name, part(&mut bytes)?));
        }
        out.push(Message {
            partition: (partition >= 0).then_some(partition),
            key,
            value,
            timestamp: (timestamp != i64::MIN).then_some(timestamp),
            headers,
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
                timestamp: Some(1_700_000_000_000),
                headers: vec![("h".into(), Some(b"v".to_vec())), ("n".into(), None)],
            },
            Message::default(),
            Message {
                partition: Some(0),
                key: Some(Vec::new()),
                value: Some(Vec::new()),
                timestamp: Some(-5),
                headers: Vec::new(),
            },
        ];
        let mut buffer = Vec::new();
        messages.iter().for_each(|m| append(&mut buffer, m));
        assert_eq!(decode(&buffer).unwrap(), messages);
        let err = decode(&buffer[..buffer.len() - 1]).unwrap_err().to_string();
        assert!(err.contains("corrupt Kafka sink state"), "{err}");
    }
}
