//! Kafka message values to rows: the value format decodes a batch of messages at once
//! where each message is one row, and message by message otherwise (changelog formats,
//! values with newlines, errors) so that every row knows its message — for the metadata
//! columns and for naming the topic, partition and offset of a value that does not
//! decode.

use crate::filesystem::format::{Decoded, Format, raw_column};
use arrow::array::{
    ArrayRef, Int8Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMillisecondArray, UInt32Array,
};
use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use std::borrow::Borrow;
use std::sync::Arc;
use weir_common::changelog::RowKind;
use weir_common::{Error, Result};

/// A metadata column and where its value comes from (Flink's keys).
#[derive(Debug, Clone, Copy)]
pub(super) enum KafkaMetadata {
    Topic,
    Partition,
    Offset,
    Timestamp,
    TimestampType,
    Headers,
}

impl KafkaMetadata {
    pub(super) const KEYS: &[&str] = &[
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestamp-type",
        "headers",
    ];

    pub(super) fn from_key(key: &str) -> Option<Self> {
        Some(match key {
            "topic" => Self::Topic,
            "partition" => Self::Partition,
            "offset" => Self::Offset,
            "timestamp" => Self::Timestamp,
            "timestamp-type" => Self::TimestampType,
            "headers" => Self::Headers,
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
    pub(super) key: Option<Vec<u8>>,
    pub(super) value: Option<Vec<u8>>,
    /// Header names and values, in order (a name may repeat).
    pub(super) headers: Vec<(String, Option<Vec<u8>>)>,
}

impl Record {
    fn value_len(&self) -> usize {
        self.value.as_ref().map_or(0, Vec::len)
    }
}

/// Decodes the messages of one table.
pub(super) struct Decoder {
    pub format: Format,
    /// The table's columns (physical and metadata).
    pub schema: SchemaRef,
    /// The table's columns without the metadata ones.
    pub physical: SchemaRef,
    /// The columns the message value holds, and their places in `physical`.
    pub value_schema: SchemaRef,
    pub value_fields: Vec<usize>,
    /// The key, when its columns are read from it (`value.fields-include` = `EXCEPT_KEY`,
    /// or `upsert-kafka`).
    pub key: Option<super::keys::Key>,
    /// `upsert-kafka`: rows are upserts and deletes by key.
    pub upsert: bool,
    /// The value's Avro layout, when its format is `avro`.
    pub value_avro: Option<crate::filesystem::avro::AvroLayout>,
    pub metadata: Vec<(usize, KafkaMetadata)>,
}

impl Decoder {
    /// Decodes the messages' values into one batch of the table's columns (metadata
    /// columns filled in), naming topic, partition and offset of a value that does not
    /// decode; also says how many records or fields were skipped.
    pub(super) fn decode(&self, records: &[Record]) -> Result<(RecordBatch, u64)> {
        if self.upsert {
            return self.decode_upsert(records);
        }
        let (values, rows, skipped) = self.decode_values(records)?;
        let Some(batch) = values else {
            return Ok((RecordBatch::new_empty(self.output_schema()), skipped));
        };
        let index = UInt32Array::from(rows);
        let batch = match &self.key {
            None => batch,
            Some(key) => self.with_key_columns(key, records, &batch, &index)?,
        };
        Ok((self.with_metadata(records, &batch, &index)?, skipped))
    }

    /// `upsert-kafka`: a message with a value upserts the row of its key (`+I`, which the
    /// ChangelogNormalize operator after the source turns into `+I` or `-U`/`+U`), one
    /// without a value deletes it (`-D` with only the key columns set).
    fn decode_upsert(&self, records: &[Record]) -> Result<(RecordBatch, u64)> {
        let key = self.key.as_ref().expect("upsert-kafka has a key");
        let valued: Vec<&Record> = records.iter().filter(|r| r.value.is_some()).collect();
        let (values, rows, skipped) = self.decode_values(&valued)?;
        let values = match values {
            Some(v) => v,
            None => RecordBatch::new_empty(self.value_schema.clone()),
        };
        // Output rows in message order: a value's rows, or one row per delete.
        let (mut value_rows, mut record_rows, mut kinds) = (Vec::new(), Vec::new(), Vec::new());
        let mut next = 0;
        for (i, r) in records.iter().enumerate() {
            if r.value.is_none() {
                value_rows.push(None);
                record_rows.push(i as u32);
                kinds.push(RowKind::Delete as i8);
                continue;
            }
            while next < rows.len() && std::ptr::eq(valued[rows[next] as usize], r) {
                value_rows.push(Some(next as u32));
                record_rows.push(i as u32);
                kinds.push(RowKind::Insert as i8);
                next += 1;
            }
        }
        let values = arrow::compute::take_record_batch(&values, &UInt32Array::from(value_rows))?;
        let index = UInt32Array::from(record_rows);
        let batch = self.with_key_columns(key, records, &values, &index)?;
        let batch = weir_common::changelog::attach(&batch, Arc::new(Int8Array::from(kinds)))?;
        Ok((self.with_metadata(records, &batch, &index)?, skipped))
    }

    /// Decodes the messages' values: one batch of the value columns (and the row kinds of
    /// a changelog format), with the position in `records` of each row's message.
    fn decode_values<R: Borrow<Record>>(
        &self,
        records: &[R],
    ) -> Result<(Option<RecordBatch>, Vec<u32>, u64)> {
        if records.is_empty() {
            return Ok((None, Vec::new(), 0));
        }
        let records: &[&Record] = &records.iter().map(|r| r.borrow()).collect::<Vec<_>>();
        let format = &self.format;
        // Decoded batches, and the record of each of their rows.
        let mut batches: Vec<RecordBatch> = Vec::new();
        let mut rows: Vec<u32> = Vec::new();
        let mut skipped = 0;
        let joined = !format.is_changelog_source()
            && records
                .iter()
                .all(|r| r.value.as_deref().is_some_and(|v| !v.contains(&b'\n')));
        let mut done = false;
        if let Some(avro) = &self.value_avro {
            let valued: Vec<(usize, &[u8])> = records
                .iter()
                .enumerate()
                .filter_map(|(i, r)| r.value.as_deref().map(|v| (i, v)))
                .collect();
            let values: Vec<&[u8]> = valued.iter().map(|(_, v)| *v).collect();
            batches.push(avro.decode_records(&values, &self.value_schema, |i| {
                let r = records[valued[i.min(valued.len() - 1)].0];
                format!(
                    "Kafka topic '{}' partition {} offset {}",
                    r.topic, r.partition, r.offset
                )
            })?);
            rows.extend(valued.iter().map(|(i, _)| *i as u32));
            done = true;
        } else if matches!(format, Format::Raw) {
            batches.push(self.raw(records)?);
            rows.extend(0..records.len() as u32);
            done = true;
        } else if joined {
            let mut text = Vec::with_capacity(records.iter().map(|r| r.value_len() + 1).sum());
            for r in records {
                text.extend_from_slice(r.value.as_deref().unwrap_or_default());
                text.push(b'\n');
            }
            let name = format!("Kafka topic '{}'", records[0].topic);
            if let Ok(decoded) = format.decode(&name, Bytes::from(text), &self.value_schema) {
                let n: usize = decoded.batches.iter().map(RecordBatch::num_rows).sum();
                if n == records.len() {
                    if decoded.skipped.count > 0 {
                        skipped += decoded.skipped.count;
                        tracing::warn!(
                            "{name}: skipped {} bad field(s) (ignore-parse-errors), first: {}",
                            decoded.skipped.count,
                            decoded.skipped.first.as_deref().unwrap_or("?")
                        );
                    }
                    batches = decoded.batches;
                    rows.extend(0..n as u32);
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
                    batches: decoded,
                    skipped: s,
                } = format.decode(&name, Bytes::copy_from_slice(value), &self.value_schema)?;
                if s.count > 0 {
                    skipped += s.count;
                    tracing::warn!(
                        "{name}: skipped a bad record (ignore-parse-errors): {}",
                        s.first.as_deref().unwrap_or("?")
                    );
                }
                for batch in decoded {
                    rows.extend(std::iter::repeat_n(i as u32, batch.num_rows()));
                    batches.push(batch);
                }
            }
        }
        let Some(first) = batches.first() else {
            return Ok((None, rows, skipped));
        };
        let batch = arrow::compute::concat_batches(&first.schema(), &batches)?;
        Ok((Some(batch), rows, skipped))
    }

    /// `batch` (the physical columns of the records `index` names) with the metadata
    /// columns in their places.
    fn with_metadata(
        &self,
        records: &[Record],
        batch: &RecordBatch,
        index: &UInt32Array,
    ) -> Result<RecordBatch> {
        crate::metadata::place(&self.schema, &self.metadata, batch, |what| {
            Ok(arrow::compute::take(
                &self.per_record(*what, records),
                index,
                None,
            )?)
        })
    }

    /// The physical columns of `values` (the value columns of the records `index` names)
    /// with the key columns decoded from the records' keys; a record without a key has
    /// nulls there.
    fn with_key_columns(
        &self,
        key: &super::keys::Key,
        records: &[Record],
        values: &RecordBatch,
        index: &UInt32Array,
    ) -> Result<RecordBatch> {
        // One key row per record that has a key.
        let mut key_rows: Vec<Option<u32>> = Vec::with_capacity(records.len());
        let mut keyed = Vec::new();
        for r in records {
            key_rows.push(r.key.as_ref().map(|_| keyed.len() as u32));
            if r.key.is_some() {
                keyed.push(r);
            }
        }
        let decoded = self.decode_keys(key, &keyed)?;
        let per_record = UInt32Array::from(key_rows);
        let rows = arrow::compute::take(&per_record, index, None)?;
        let rows = rows.as_any().downcast_ref::<UInt32Array>().expect("u32");
        let (data, ops) = weir_common::changelog::split(values);
        let mut columns = Vec::with_capacity(self.physical.fields().len());
        for i in 0..self.physical.fields().len() {
            match key.fields.iter().position(|k| *k == i) {
                Some(k) => columns.push(arrow::compute::take(decoded.column(k), rows, None)?),
                None => {
                    let v = self.value_fields.iter().position(|f| *f == i);
                    columns.push(data.column(v.expect("a value column")).clone());
                }
            }
        }
        let out = RecordBatch::try_new(self.physical.clone(), columns)?;
        Ok(match ops {
            Some(ops) => weir_common::changelog::attach(&out, Arc::new(ops))?,
            None => out,
        })
    }

    /// The keys of `records` (all with a key), one row each.
    fn decode_keys(&self, key: &super::keys::Key, records: &[&Record]) -> Result<RecordBatch> {
        let bytes = |r: &Record| r.key.clone().unwrap_or_default();
        if records.is_empty() {
            return Ok(RecordBatch::new_empty(key.schema.clone()));
        }
        if let Some(avro) = &key.avro {
            let keys: Vec<Vec<u8>> = records.iter().map(|r| bytes(r)).collect();
            let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            return avro.decode_records(&keys, &key.schema, |i| {
                let r = records[i.min(records.len() - 1)];
                format!(
                    "the key of Kafka topic '{}' partition {} offset {}",
                    r.topic, r.partition, r.offset
                )
            });
        }
        if matches!(key.format, Format::Raw) {
            let column: ArrayRef = if raw_column(&key.schema)? {
                let mut values = Vec::with_capacity(records.len());
                for r in records {
                    values.push(String::from_utf8(bytes(r)).map_err(|e| {
                        Error::input(format!(
                            "Kafka topic '{}' partition {} offset {}: the key is not UTF-8: {e}",
                            r.topic, r.partition, r.offset
                        ))
                    })?);
                }
                Arc::new(StringArray::from(values))
            } else {
                Arc::new(arrow::array::BinaryArray::from_iter_values(
                    records.iter().map(|r| bytes(r)),
                ))
            };
            return Ok(RecordBatch::try_new(key.schema.clone(), vec![column])?);
        }
        // All keys at once when each is one line, else one by one (exact errors).
        if records
            .iter()
            .all(|r| r.key.as_deref().is_some_and(|k| !k.contains(&b'\n')))
        {
            let mut text = Vec::new();
            for r in records {
                text.extend_from_slice(r.key.as_deref().unwrap_or_default());
                text.push(b'\n');
            }
            let name = format!("the keys of Kafka topic '{}'", records[0].topic);
            if let Ok(decoded) = key.format.decode(&name, Bytes::from(text), &key.schema) {
                let n: usize = decoded.batches.iter().map(RecordBatch::num_rows).sum();
                if n == records.len() && decoded.skipped.count == 0 {
                    return Ok(arrow::compute::concat_batches(
                        &key.schema,
                        &decoded.batches,
                    )?);
                }
            }
        }
        let mut batches = Vec::with_capacity(records.len());
        for r in records {
            let name = format!(
                "the key of Kafka topic '{}' partition {} offset {}",
                r.topic, r.partition, r.offset
            );
            let decoded = key
                .format
                .decode(&name, Bytes::from(bytes(r)), &key.schema)?;
            let n: usize = decoded.batches.iter().map(RecordBatch::num_rows).sum();
            if n != 1 {
                return Err(Error::input(format!("{name}: holds {n} rows, not one")));
            }
            batches.extend(decoded.batches);
        }
        Ok(arrow::compute::concat_batches(&key.schema, &batches)?)
    }

    /// The table's columns, and the row kinds of a changelog format.
    fn output_schema(&self) -> SchemaRef {
        let schema = self.schema.clone();
        if self.upsert || self.format.is_changelog_source() {
            weir_common::changelog::with_op_field(&schema)
        } else {
            schema
        }
    }

    /// `raw`: each message value is one value, newlines and all.
    fn raw(&self, records: &[&Record]) -> Result<RecordBatch> {
        let column: ArrayRef = if raw_column(&self.value_schema)? {
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
        Ok(RecordBatch::try_new(
            self.value_schema.clone(),
            vec![column],
        )?)
    }

    /// A metadata column's value for every record.
    fn per_record(&self, what: KafkaMetadata, records: &[Record]) -> ArrayRef {
        match what {
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
            KafkaMetadata::Headers => {
                let names = arrow::array::builder::MapFieldNames {
                    entry: "entries".into(),
                    key: "key".into(),
                    value: "value".into(),
                };
                let mut map = arrow::array::builder::MapBuilder::new(
                    Some(names),
                    arrow::array::builder::StringBuilder::new(),
                    arrow::array::builder::BinaryBuilder::new(),
                );
                for r in records {
                    for (name, value) in &r.headers {
                        map.keys().append_value(name);
                        map.values().append_option(value.as_deref());
                    }
                    map.append(true).expect("keys and values in step");
                }
                Arc::new(map.finish())
            }
        }
    }
}
