//! Flink's `avro` format, on the `arrow-avro` crate (Arrow's own Avro reader and writer).
//!
//! The Avro schema is derived from the table's columns as Flink's `AvroSchemaConverter`
//! derives it: a record named `record` (nested rows `record_<field>`), a nullable column
//! as the union `["null", T]` with default `null`, `INT`/`SMALLINT`/`TINYINT` as `int`,
//! `BIGINT` as `long`, `STRING` as `string`, `BYTES` as `bytes`, `DECIMAL(p, s)` as
//! `bytes` with logical type `decimal`, `DATE` as `int` (`date`), `TIME` as `int`
//! (`time-millis`), `TIMESTAMP(p)`/`TIMESTAMP_LTZ(p)` as `long` (`timestamp-millis`, or
//! `timestamp-micros` above precision 3), `ARRAY` as `array`, `MAP` as `map`, `ROW` as a
//! record. Data written by Flink with the same table reads here, and the other way round.
//!
//! A file is an Avro object container file (`avro.codec`: `null` by default, `deflate`,
//! `snappy`, `zstd`); a Kafka message is one record's binary encoding, without header.

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow_avro::reader::{Decoder as AvroDecoder, ReaderBuilder};
use arrow_avro::schema::{
    AvroSchema, Fingerprint, SCHEMA_METADATA_KEY, SINGLE_OBJECT_MAGIC, SchemaStore,
};
use arrow_avro::writer::WriterBuilder;
use arrow_avro::writer::format::AvroBinaryFormat;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use weir_common::{ConnectorOptions, Error, Result};

/// The `avro.*` options.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AvroOptions {
    /// `avro.codec` (files only).
    pub codec: Option<String>,
}

impl AvroOptions {
    pub fn from_options(options: &ConnectorOptions) -> Result<Self> {
        let codec = options.get("avro.codec").map(str::to_ascii_lowercase);
        match codec.as_deref() {
            None | Some("null" | "deflate" | "snappy" | "zstd" | "zstandard") => {}
            Some(other) => {
                return Err(Error::config(format!(
                    "table '{}': invalid 'avro.codec' '{other}'; expected one of: null, deflate, \
                     snappy, zstd",
                    options.table
                )));
            }
        }
        Ok(Self {
            codec: codec.filter(|c| c != "null"),
        })
    }
}

/// The Avro schema (JSON) Flink derives for a table with these columns.
pub fn flink_schema(schema: &Schema) -> Result<String> {
    Ok(record("record", schema.fields().iter().map(|f| f.as_ref()))?.to_string())
}

fn record<'a>(name: &str, fields: impl Iterator<Item = &'a Field>) -> Result<Value> {
    let fields: Vec<Value> = fields
        .map(|f| {
            let nested = format!("{name}_{}", f.name());
            let t = avro_type(f.data_type(), f.is_nullable(), &nested)?;
            let mut field = json!({ "name": f.name(), "type": t });
            if f.is_nullable() {
                field["default"] = Value::Null;
            }
            Ok(field)
        })
        .collect::<Result<_>>()?;
    Ok(json!({ "type": "record", "name": name, "fields": fields }))
}

fn avro_type(t: &DataType, nullable: bool, name: &str) -> Result<Value> {
    let logical = |base: &str, logical: &str| json!({ "type": base, "logicalType": logical });
    let plain = match t {
        DataType::Boolean => json!("boolean"),
        DataType::Int8 | DataType::Int16 | DataType::Int32 => json!("int"),
        DataType::Int64 => json!("long"),
        DataType::Float32 => json!("float"),
        DataType::Float64 => json!("double"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => json!("string"),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => json!("bytes"),
        DataType::Decimal128(p, s) => json!({
            "type": "bytes", "logicalType": "decimal", "precision": p, "scale": s
        }),
        DataType::Date32 => logical("int", "date"),
        DataType::Time32(_) => logical("int", "time-millis"),
        DataType::Timestamp(TimeUnit::Second | TimeUnit::Millisecond, _) => {
            logical("long", "timestamp-millis")
        }
        DataType::Timestamp(_, _) => logical("long", "timestamp-micros"),
        DataType::List(item) => json!({
            "type": "array",
            "items": avro_type(item.data_type(), item.is_nullable(), name)?
        }),
        DataType::Map(entries, _) => {
            let DataType::Struct(kv) = entries.data_type() else {
                unreachable!("a map's entries are a struct")
            };
            if kv[0].data_type() != &DataType::Utf8 {
                return Err(Error::config(format!(
                    "format 'avro' writes maps with STRING keys only, not {}",
                    kv[0].data_type()
                )));
            }
            json!({
                "type": "map",
                "values": avro_type(kv[1].data_type(), kv[1].is_nullable(), name)?
            })
        }
        DataType::Struct(fields) => record(name, fields.iter().map(|f| f.as_ref()))?,
        other => {
            return Err(Error::config(format!(
                "format 'avro' cannot hold a column of type {other}"
            )));
        }
    };
    Ok(match nullable {
        true => json!(["null", plain]),
        false => plain,
    })
}

/// The table's Avro schema, and the Arrow schema `arrow-avro` reads it as.
#[derive(Debug, Clone)]
pub struct AvroLayout {
    json: String,
    /// The Arrow types `arrow-avro` uses for the Avro types (written batches are cast to
    /// them, read ones from them), with the Avro schema in its metadata.
    natural: SchemaRef,
    fingerprint: Fingerprint,
    store: SchemaStore,
}

impl AvroLayout {
    pub fn new(schema: &Schema) -> Result<Self> {
        let json = flink_schema(schema)?;
        let mut store = SchemaStore::new();
        let fingerprint = store
            .register(AvroSchema::new(json.clone()))
            .map_err(|e| Error::config(format!("format 'avro': {e}")))?;
        let decoder = Self::decoder_with(&store, fingerprint)?;
        let natural = decoder.schema();
        let natural = Arc::new(Schema::new_with_metadata(
            natural.fields().clone(),
            HashMap::from([(SCHEMA_METADATA_KEY.to_string(), json.clone())]),
        ));
        Ok(Self {
            json,
            natural,
            fingerprint,
            store,
        })
    }

    fn decoder_with(store: &SchemaStore, fingerprint: Fingerprint) -> Result<AvroDecoder> {
        ReaderBuilder::new()
            .with_batch_size(8192)
            .with_writer_schema_store(store.clone())
            .with_active_fingerprint(fingerprint)
            .build_decoder()
            .map_err(|e| Error::config(format!("format 'avro': {e}")))
    }

    /// `batch` in the Arrow types the writer takes.
    fn natural_batch(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let columns = batch
            .columns()
            .iter()
            .zip(self.natural.fields())
            .map(|(c, f)| Ok(arrow::compute::cast(c, f.data_type())?))
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new(self.natural.clone(), columns)?)
    }

    /// Each row of `batch` as the binary encoding of one record (a Kafka message).
    pub fn encode_records(&self, batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
        let mut encoder = WriterBuilder::new(self.natural.as_ref().clone())
            .build_encoder::<AvroBinaryFormat>()
            .map_err(|e| Error::external(format!("format 'avro': {e}")))?;
        encoder
            .encode(&self.natural_batch(batch)?)
            .map_err(|e| Error::external(format!("format 'avro': {e}")))?;
        Ok(encoder.flush().iter().map(|row| row.to_vec()).collect())
    }

    /// One row per record (`bytes` holds one record's binary encoding each), cast to
    /// `schema`; `name(i)` says where record `i` came from, for errors.
    pub fn decode_records(
        &self,
        records: &[&[u8]],
        schema: &SchemaRef,
        name: impl Fn(usize) -> String,
    ) -> Result<RecordBatch> {
        let mut decoder = Self::decoder_with(&self.store, self.fingerprint)?;
        let Fingerprint::Rabin(fp) = self.fingerprint else {
            unreachable!("a registered schema has a Rabin fingerprint")
        };
        let mut prefix = SINGLE_OBJECT_MAGIC.to_vec();
        prefix.extend_from_slice(&fp.to_le_bytes());
        let mut batches = Vec::new();
        let mut framed = Vec::new();
        for (i, record) in records.iter().enumerate() {
            framed.clear();
            framed.extend_from_slice(&prefix);
            framed.extend_from_slice(record);
            let bad = |why: String| {
                Error::input(format!(
                    "{}: not an Avro record of the table: {why}",
                    name(i)
                ))
            };
            let used = decoder.decode(&framed).map_err(|e| bad(e.to_string()))?;
            if used != framed.len() {
                return Err(bad(format!(
                    "{} of its {} bytes hold the record",
                    used.saturating_sub(prefix.len()),
                    record.len()
                )));
            }
            if decoder.batch_is_full() {
                batches.extend(decoder.flush().map_err(|e| bad(e.to_string()))?);
            }
        }
        batches.extend(
            decoder
                .flush()
                .map_err(|e| Error::input(format!("{}: {e}", name(records.len()))))?,
        );
        let decoded = arrow::compute::concat_batches(&decoder.schema(), &batches)?;
        conform_to(&decoded, schema)
    }

    /// An object container file writer over a growing buffer, advertising the table's
    /// Avro schema (the one Flink derives) in its header.
    pub fn file_writer(&self, options: &AvroOptions) -> Result<AvroFileWriter> {
        let codec = options.codec.clone().unwrap_or_else(|| "null".into());
        let codec = match codec.as_str() {
            "zstd" => "zstandard".to_string(),
            _ => codec,
        };
        let sync = *uuid::Uuid::new_v4().as_bytes();
        let mut out = b"Obj\x01".to_vec();
        write_long(&mut out, 2);
        for (key, value) in [("avro.schema", self.json.as_str()), ("avro.codec", &codec)] {
            write_bytes(&mut out, key.as_bytes());
            write_bytes(&mut out, value.as_bytes());
        }
        write_long(&mut out, 0);
        out.extend_from_slice(&sync);
        Ok(AvroFileWriter {
            layout: self.clone(),
            codec,
            sync,
            out,
        })
    }

    /// The Avro schema JSON.
    pub fn json(&self) -> &str {
        &self.json
    }
}

/// An Avro object container file being written: one block per batch.
pub struct AvroFileWriter {
    layout: AvroLayout,
    /// `avro.codec` as the header names it.
    codec: String,
    sync: [u8; 16],
    out: Vec<u8>,
}

impl AvroFileWriter {
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let records = self.layout.encode_records(batch)?;
        let data: Vec<u8> = records.concat();
        let block = match self.codec.as_str() {
            "deflate" => {
                use std::io::Write;
                let mut e =
                    flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(&data)?;
                e.finish()?
            }
            "snappy" => {
                let mut block = snap::raw::Encoder::new()
                    .compress_vec(&data)
                    .map_err(|e| Error::external(format!("format 'avro': snappy: {e}")))?;
                block.extend_from_slice(&crc32fast::hash(&data).to_be_bytes());
                block
            }
            "zstandard" => zstd::bulk::compress(&data, 0)?,
            _ => data,
        };
        write_long(&mut self.out, records.len() as i64);
        write_bytes(&mut self.out, &block);
        self.out.extend_from_slice(&self.sync);
        Ok(())
    }

    /// Bytes written so far.
    pub fn size(&self) -> usize {
        self.out.len()
    }

    pub fn finish(self) -> Result<Vec<u8>> {
        Ok(self.out)
    }
}

impl std::fmt::Debug for AvroFileWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AvroFileWriter")
    }
}

/// Avro's `long`: zig-zag, then base-128 varint.
fn write_long(out: &mut Vec<u8>, v: i64) {
    let mut n = ((v << 1) ^ (v >> 63)) as u64;
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Avro's `bytes` (and `string`): length, then the bytes.
fn write_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    write_long(out, bytes.len() as i64);
    out.extend_from_slice(bytes);
}

/// Reads an object container file (any writer schema whose fields the table names) into
/// batches of `schema`.
pub fn decode_file(
    name: &str,
    bytes: bytes::Bytes,
    schema: &SchemaRef,
) -> Result<Vec<RecordBatch>> {
    let bad = |e: &dyn std::fmt::Display| Error::input(format!("cannot read '{name}': {e}"));
    let reader = ReaderBuilder::new()
        .with_batch_size(8192)
        .build(std::io::Cursor::new(bytes))
        .map_err(|e| bad(&e))?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| bad(&e))?;
        out.push(super::format::conform(name, &batch, schema)?);
    }
    Ok(out)
}

/// `batch` (columns in the table's order) with the table's types.
fn conform_to(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| Ok(arrow::compute::cast(c, f.data_type())?))
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_is_flinks() {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("price", DataType::Decimal128(10, 2), true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        ]);
        let json: Value = serde_json::from_str(&flink_schema(&schema).unwrap()).unwrap();
        assert_eq!(
            json,
            json!({"type": "record", "name": "record", "fields": [
                {"name": "id", "type": "long"},
                {"name": "name", "type": ["null", "string"], "default": null},
                {"name": "price", "type": ["null", {"type": "bytes", "logicalType": "decimal",
                    "precision": 10, "scale": 2}], "default": null},
                {"name": "ts", "type": ["null", {"type": "long",
                    "logicalType": "timestamp-millis"}], "default": null},
            ]})
        );
    }

    #[test]
    fn files_carry_the_flink_schema_and_read_back_with_every_codec() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(arrow::array::Int64Array::from(vec![1, 2, 3])),
                Arc::new(arrow::array::StringArray::from(vec![
                    Some("a"),
                    None,
                    Some("c"),
                ])),
            ],
        )
        .unwrap();
        let layout = AvroLayout::new(&schema).unwrap();
        for codec in [None, Some("deflate"), Some("snappy"), Some("zstd")] {
            let options = AvroOptions {
                codec: codec.map(str::to_string),
            };
            let mut w = layout.file_writer(&options).unwrap();
            w.write(&batch).unwrap();
            w.write(&batch.slice(0, 1)).unwrap();
            let bytes = w.finish().unwrap();
            let header = String::from_utf8_lossy(&bytes[..200]).to_string();
            assert!(header.contains(r#""name":"record""#), "{header}");
            let read = decode_file("t", bytes::Bytes::from(bytes), &schema).unwrap();
            let all = arrow::compute::concat_batches(&schema, &read).unwrap();
            assert_eq!(all.num_rows(), 4, "{codec:?}");
            assert_eq!(all.slice(0, 3), batch, "{codec:?}");
        }
    }
}
