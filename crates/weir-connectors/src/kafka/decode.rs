//! Kafka message values to rows: the value format decodes a batch of messages at once
//! where each message is one row, and message by message otherwise (changelog formats,
//! values with newlines, errors) so that every row knows its message — for the metadata
//! columns and for naming the topic, partition and offset of a value that does not
//! decode.

use crate::filesystem::format::{Decoded, Format};
use arrow::array::{
    ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray,
    UInt32Array,
};
use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use std::sync::Arc;
use weir_common::{Error, Result};

/// A metadata column and where its value comes from (Flink's keys).
#[derive(Debug, Clone, Copy)]
pub(super) enum KafkaMetadata {
    Topic,
    Partition,
    Offset,
    Timestamp,
    TimestampType,
}

impl KafkaMetadata {
    pub(super) const KEYS: &[&str] = &[
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestamp-type",
    ];

    pub(super) fn from_key(key: &str) -> Option<Self> {
        Some(match key {
            "topic" => Self::Topic,
            "partition" => Self::Partition,
            "offset" => Self::Offset,
            "timestamp" => Self::Timestamp,
            "timestamp-type" => Self::TimestampType,
            _ => return None,
        })
    }
}

/// One message, copied out of librdkafka's buffers.
pub(super) struct Record {
    pub(super) topic: Arc<str>,
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) timestamp: Option<i64>,
    pub(super) timestamp_type: &'static str,
    pub(super) value: Option<Vec<u8>>,
}

impl Record {
    fn value_len(&self) -> usize {
        self.value.as_ref().map_or(0, Vec::len)
    }
}

/// Decodes the messages of one table.
pub(super) struct Decoder {
    pub table: String,
    pub format: Format,
    /// The table's columns (physical and metadata).
    pub schema: SchemaRef,
    /// The columns the message value holds.
    pub value_schema: SchemaRef,
    pub metadata: Vec<(usize, KafkaMetadata)>,
}

impl Decoder {
    /// Decodes the messages' values into one batch of the table's columns (metadata
    /// columns filled in), naming topic, partition and offset of a value that does not
    /// decode; also says how many records or fields were skipped.
    pub(super) fn decode(&self, records: &[Record]) -> Result<(RecordBatch, u64)> {
        let shared = self;
        let format = &shared.format;
        // (batch, the record of each of its rows)
        let mut pieces: Vec<(RecordBatch, Vec<u32>)> = Vec::new();
        let mut skipped = 0;
        let joined = !format.is_changelog_source()
            && records
                .iter()
                .all(|r| r.value.as_deref().is_some_and(|v| !v.contains(&b'\n')));
        let mut done = false;
        if matches!(format, Format::Raw) {
            pieces.push(self.raw(records)?);
            done = true;
        } else if joined {
            let mut text = Vec::with_capacity(records.iter().map(|r| r.value_len() + 1).sum());
            for r in records {
                text.extend_from_slice(r.value.as_deref().unwrap_or_default());
                text.push(b'\n');
            }
            let name = format!("Kafka topic '{}'", records[0].topic);
            if let Ok(decoded) = format.decode(&name, Bytes::from(text), &shared.value_schema) {
                let rows: usize = decoded.batches.iter().map(RecordBatch::num_rows).sum();
                if rows == records.len() {
                    if decoded.skipped.count > 0 {
                        skipped += decoded.skipped.count;
                        tracing::warn!(
                            "{name}: skipped {} bad field(s) (ignore-parse-errors), first: {}",
                            decoded.skipped.count,
                            decoded.skipped.first.as_deref().unwrap_or("?")
                        );
                    }
                    let mut first = 0u32;
                    for batch in decoded.batches {
                        let n = batch.num_rows() as u32;
                        pieces.push((batch, (first..first + n).collect()));
                        first += n;
                    }
                    done = true;
                }
            }
        }
        if !done {
            // One message at a time: exact rows per message, and errors at their offset.
            for (i, r) in records.iter().enumerate() {
                // A tombstone (no value) holds no row, as in Flink.
                let Some(value) = &r.value else { continue };
                let name = format!(
                    "Kafka topic '{}' partition {} offset {}",
                    r.topic, r.partition, r.offset
                );
                let Decoded {
                    batches,
                    skipped: s,
                } = format.decode(&name, Bytes::copy_from_slice(value), &shared.value_schema)?;
                if s.count > 0 {
                    skipped += s.count;
                    tracing::warn!(
                        "{name}: skipped a bad record (ignore-parse-errors): {}",
                        s.first.as_deref().unwrap_or("?")
                    );
                }
                for batch in batches {
                    let rows = vec![i as u32; batch.num_rows()];
                    pieces.push((batch, rows));
                }
            }
        }
        let batches = pieces
            .into_iter()
            .map(|(batch, rows)| self.with_metadata(&batch, records, &rows))
            .collect::<Result<Vec<_>>>()?;
        let schema = self.output_schema();
        Ok((arrow::compute::concat_batches(&schema, &batches)?, skipped))
    }

    pub(super) fn output_schema(&self) -> SchemaRef {
        let schema = self.schema.clone();
        if self.format.is_changelog_source() {
            weir_common::changelog::with_op_field(&schema)
        } else {
            schema
        }
    }

    /// `raw`: each message value is one value, newlines and all.
    fn raw(&self, records: &[Record]) -> Result<(RecordBatch, Vec<u32>)> {
        use arrow::datatypes::DataType;
        let schema = &self.value_schema;
        let text = match schema.fields().as_ref() {
            [f] if f.data_type() == &DataType::Utf8 => true,
            [f] if f.data_type() == &DataType::Binary => false,
            _ => {
                return Err(Error::config(format!(
                    "table '{}': format 'raw' needs exactly one STRING or BYTES column",
                    self.table
                )));
            }
        };
        let column: ArrayRef = if text {
            let mut values = Vec::with_capacity(records.len());
            for r in records {
                values.push(match &r.value {
                    None => None,
                    Some(v) => Some(std::str::from_utf8(v).map_err(|e| {
                        Error::input(format!(
                            "Kafka topic '{}' partition {} offset {}: the value is not UTF-8: {e}",
                            r.topic, r.partition, r.offset
                        ))
                    })?),
                });
            }
            Arc::new(StringArray::from(values))
        } else {
            Arc::new(arrow::array::BinaryArray::from_iter(
                records.iter().map(|r| r.value.as_deref()),
            ))
        };
        let batch = RecordBatch::try_new(schema.clone(), vec![column])?;
        Ok((batch, (0..records.len() as u32).collect()))
    }

    /// A decoded batch with the metadata columns put in their places; `rows` names the
    /// record of each row.
    fn with_metadata(
        &self,
        batch: &RecordBatch,
        records: &[Record],
        rows: &[u32],
    ) -> Result<RecordBatch> {
        let shared = self;
        if shared.metadata.is_empty() {
            return Ok(batch.clone());
        }
        let (data, ops) = weir_common::changelog::split(batch);
        let index = UInt32Array::from(rows.to_vec());
        let mut value_columns = data.columns().iter();
        let mut columns = Vec::with_capacity(shared.schema.fields().len());
        for (i, field) in shared.schema.fields().iter().enumerate() {
            let Some((_, what)) = shared.metadata.iter().find(|(m, _)| *m == i) else {
                columns.push(value_columns.next().expect("one per value column").clone());
                continue;
            };
            let per_record: ArrayRef = match what {
                KafkaMetadata::Topic => Arc::new(StringArray::from_iter_values(
                    records.iter().map(|r| r.topic.as_ref()),
                )),
                KafkaMetadata::Partition => Arc::new(Int32Array::from_iter_values(
                    records.iter().map(|r| r.partition),
                )),
                KafkaMetadata::Offset => Arc::new(Int64Array::from_iter_values(
                    records.iter().map(|r| r.offset),
                )),
                KafkaMetadata::Timestamp => Arc::new(
                    TimestampMillisecondArray::from_iter(records.iter().map(|r| r.timestamp))
                        .with_timezone("+00:00"),
                ),
                KafkaMetadata::TimestampType => Arc::new(StringArray::from_iter_values(
                    records.iter().map(|r| r.timestamp_type),
                )),
            };
            let taken = arrow::compute::take(&per_record, &index, None)?;
            columns.push(arrow::compute::cast(&taken, field.data_type())?);
        }
        let out = RecordBatch::try_new(shared.schema.clone(), columns)?;
        Ok(match ops {
            Some(ops) => weir_common::changelog::attach(&out, Arc::new(ops))?,
            None => out,
        })
    }
}
