//! File formats: parsing the `format` option, encoding batches, decoding files.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use std::sync::LazyLock;
use weir_common::{ConnectorOptions, Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Parquet,
    Csv {
        delimiter: u8,
        header: bool,
    },
    Json,
    /// Flink's `debezium-json`: `{"before":…,"after":…,"op":"c"|"d"}` per row, so a sink
    /// can take the updates of a changelog (`+I`/`+U` as `c`, `-U`/`-D` as `d`).
    DebeziumJson,
}

impl Format {
    pub fn from_options(options: &ConnectorOptions) -> Result<Self> {
        let format = options.required("format")?;
        match format.to_ascii_lowercase().as_str() {
            "parquet" => Ok(Format::Parquet),
            "json" => Ok(Format::Json),
            "debezium-json" => Ok(Format::DebeziumJson),
            "csv" => {
                let delimiter = match options.get("csv.field-delimiter") {
                    None => b',',
                    Some(d) if d.len() == 1 => d.as_bytes()[0],
                    Some("\\t") => b'\t',
                    Some(d) => {
                        return Err(Error::config(format!(
                            "table '{}': 'csv.field-delimiter' must be one character, got '{d}'",
                            options.table
                        )));
                    }
                };
                // Flink's csv has no header line: neither read nor written.
                let header = options.get_bool("csv.ignore-first-line")?.unwrap_or(false);
                Ok(Format::Csv { delimiter, header })
            }
            other => Err(Error::config(format!(
                "table '{}': unknown format '{other}'; supported formats: parquet, csv, json, debezium-json",
                options.table
            ))),
        }
    }

    pub fn extension(&self) -> &'static str {
        match self {
            Format::Parquet => "parquet",
            Format::Csv { .. } => "csv",
            Format::Json | Format::DebeziumJson => "json",
        }
    }

    /// Whether files of this format can hold updates (`-U`, `+U`, `-D` rows).
    pub fn takes_changelog(&self) -> bool {
        matches!(self, Format::DebeziumJson)
    }

    /// Decodes a whole file into batches of `schema` (columns matched by name for Parquet).
    pub fn decode(&self, name: &str, bytes: Bytes, schema: &SchemaRef) -> Result<Vec<RecordBatch>> {
        let bad = |e: &dyn std::fmt::Display| Error::input(format!("cannot read '{name}': {e}"));
        match self {
            Format::Parquet => {
                let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
                    .map_err(|e| bad(&e))?
                    .with_batch_size(8192)
                    .build()
                    .map_err(|e| bad(&e))?;
                let mut out = Vec::new();
                for batch in reader {
                    let batch = batch.map_err(|e| bad(&e))?;
                    out.push(conform(name, &batch, schema)?);
                }
                Ok(out)
            }
            Format::Csv { delimiter, header } => {
                // As in Flink, an empty field is an empty STRING, not NULL (and an empty
                // number is an error): nothing is read as NULL.
                static NEVER_NULL: LazyLock<regex::Regex> =
                    LazyLock::new(|| regex::Regex::new(r"[^\s\S]").expect("a valid regex"));
                let reader = arrow::csv::ReaderBuilder::new(schema.clone())
                    .with_header(*header)
                    .with_null_regex(NEVER_NULL.clone())
                    .with_delimiter(*delimiter)
                    .with_batch_size(8192)
                    .build(std::io::Cursor::new(bytes))
                    .map_err(|e| bad(&e))?;
                reader.collect::<Result<Vec<_>, _>>().map_err(|e| {
                    Error::input(format!("cannot read '{name}': {}", csv_error(&e, schema)))
                })
            }
            Format::DebeziumJson => Err(Error::config(format!(
                "cannot read '{name}': format 'debezium-json' can only be written so far"
            ))),
            Format::Json => {
                let reader = arrow::json::ReaderBuilder::new(schema.clone())
                    .with_batch_size(8192)
                    .build(std::io::Cursor::new(bytes.clone()))
                    .map_err(|e| bad(&e))?;
                reader.collect::<Result<Vec<_>, _>>().map_err(|e| {
                    Error::input(format!(
                        "cannot read '{name}': {}",
                        json_error(&bytes, schema, &e)
                    ))
                })
            }
        }
    }
}

/// Arrow's CSV error with the line counted from 1 (arrow counts from 0) and the column by
/// name: "line 4, column 'score': cannot parse 'x' as Int32".
fn csv_error(e: &arrow::error::ArrowError, schema: &SchemaRef) -> String {
    let text = e.to_string();
    static ARROW_CSV_ERROR: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(
            r"Error while parsing value '(?s:(.*))' as type '([^']*)' for column (\d+) at line (\d+)",
        )
        .expect("a valid regex")
    });
    let Some(c) = ARROW_CSV_ERROR.captures(&text) else {
        return text;
    };
    let (value, ty) = (&c[1], &c[2]);
    let column: usize = c[3].parse().unwrap_or(0);
    let line: usize = c[4].parse().unwrap_or(0);
    let name = schema
        .fields()
        .get(column)
        .map(|f| f.name().as_str())
        .unwrap_or("?");
    format!(
        "line {}, column '{name}': cannot parse '{value}' as {ty}",
        line + 1
    )
}

/// Arrow's JSON reader does not say where a bad record is: find the first line that does
/// not decode on its own and name it (only on this error path, so reading stays fast).
fn json_error(bytes: &Bytes, schema: &SchemaRef, e: &arrow::error::ArrowError) -> String {
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let decoded = arrow::json::ReaderBuilder::new(schema.clone())
            .build(std::io::Cursor::new(line))
            .and_then(|r| r.collect::<Result<Vec<_>, _>>());
        if let Err(line_error) = decoded {
            return format!("line {}: {line_error}", i + 1);
        }
    }
    e.to_string()
}

/// Picks the table's columns out of a file's batch by name, casting where types differ.
fn conform(name: &str, batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let idx = batch.schema().index_of(field.name()).map_err(|_| {
            Error::input(format!(
                "file '{name}' has no column '{}' (it has: {})",
                field.name(),
                batch
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let col = batch.column(idx);
        if col.data_type() == field.data_type() {
            columns.push(col.clone());
        } else {
            // Not the default "safe" cast, which turns a value that does not convert into a
            // NULL: a file that does not hold what the table declares is an error.
            let options = arrow::compute::CastOptions {
                safe: false,
                ..Default::default()
            };
            columns.push(
                arrow::compute::cast_with_options(col, field.data_type(), &options).map_err(
                    |e| {
                        Error::input(format!(
                            "file '{name}': column '{}' has type {} and cannot be read as {}: {e}",
                            field.name(),
                            col.data_type(),
                            field.data_type()
                        ))
                    },
                )?,
            );
        }
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

fn parquet_error(e: parquet::errors::ParquetError) -> Error {
    Error::external(format!("cannot encode Parquet: {e}"))
}

/// An open part file being encoded in memory.
pub enum PartEncoder {
    Parquet(ArrowWriter<Vec<u8>>),
    /// The CSV writer hides its buffer, so its size is estimated from the input.
    Csv(arrow::csv::Writer<Vec<u8>>, usize),
    Json(arrow::json::LineDelimitedWriter<Vec<u8>>),
    Debezium(arrow::json::LineDelimitedWriter<Vec<u8>>),
}

impl PartEncoder {
    pub fn new(format: Format, schema: &SchemaRef) -> Result<Self> {
        Ok(match format {
            Format::Parquet => {
                let props = WriterProperties::builder()
                    .set_compression(Compression::SNAPPY)
                    .build();
                PartEncoder::Parquet(
                    ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props))
                        .map_err(parquet_error)?,
                )
            }
            Format::Csv { delimiter, header } => PartEncoder::Csv(
                arrow::csv::WriterBuilder::new()
                    .with_header(header)
                    .with_delimiter(delimiter)
                    .build(Vec::new()),
                0,
            ),
            Format::Json => PartEncoder::Json(arrow::json::LineDelimitedWriter::new(Vec::new())),
            Format::DebeziumJson => PartEncoder::Debezium(
                arrow::json::WriterBuilder::new()
                    .with_explicit_nulls(true)
                    .build::<_, arrow::json::writer::LineDelimited>(Vec::new()),
            ),
        })
    }

    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if weir_common::changelog::is_changelog(batch) && !matches!(self, PartEncoder::Debezium(_))
        {
            return Err(Error::internal(
                "a changelog reached a file format that cannot hold updates",
            ));
        }
        match self {
            PartEncoder::Parquet(w) => w.write(batch).map_err(parquet_error)?,
            PartEncoder::Csv(w, size) => {
                w.write(batch)?;
                *size += batch.get_array_memory_size();
            }
            PartEncoder::Json(w) => w.write(batch)?,
            PartEncoder::Debezium(w) => w.write(&debezium(batch)?)?,
        }
        Ok(())
    }

    /// Bytes written so far (an estimate for Parquet, which buffers row groups).
    pub fn size(&self) -> usize {
        match self {
            PartEncoder::Parquet(w) => w.bytes_written() + w.in_progress_size(),
            PartEncoder::Csv(_, size) => *size,
            PartEncoder::Json(w) | PartEncoder::Debezium(w) => w.get_ref().len(),
        }
    }

    pub fn finish(self) -> Result<Vec<u8>> {
        Ok(match self {
            PartEncoder::Parquet(w) => w.into_inner().map_err(parquet_error)?,
            PartEncoder::Csv(w, _) => w.into_inner(),
            PartEncoder::Json(mut w) | PartEncoder::Debezium(mut w) => {
                w.finish()?;
                w.into_inner()
            }
        })
    }
}

/// Re-shapes a (changelog) batch as Debezium envelopes: `before` holds retracted rows,
/// `after` inserted ones, `op` is `c` or `d` (as Flink's `debezium-json` writes them).
fn debezium(batch: &RecordBatch) -> Result<RecordBatch> {
    use arrow::array::{ArrayRef, StringArray, StructArray};
    use arrow::buffer::NullBuffer;
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;
    let (data, ops) = weir_common::changelog::split(batch);
    let retracted: Vec<bool> = (0..data.num_rows())
        .map(|i| weir_common::changelog::kind_at(ops.as_ref(), i).is_retraction())
        .collect();
    let fields = data.schema().fields().clone();
    let envelope = |keep: &dyn Fn(bool) -> bool| -> Result<ArrayRef> {
        let nulls = NullBuffer::from(retracted.iter().map(|r| keep(*r)).collect::<Vec<_>>());
        Ok(Arc::new(StructArray::try_new(
            fields.clone(),
            data.columns().to_vec(),
            Some(nulls),
        )?))
    };
    let row_type = DataType::Struct(fields.clone());
    let schema = Arc::new(Schema::new(vec![
        Field::new("before", row_type.clone(), true),
        Field::new("after", row_type, true),
        Field::new("op", DataType::Utf8, false),
    ]));
    let op: ArrayRef = Arc::new(StringArray::from_iter_values(
        retracted.iter().map(|r| if *r { "d" } else { "c" }),
    ));
    Ok(RecordBatch::try_new(
        schema,
        vec![envelope(&|r| r)?, envelope(&|r| !r)?, op],
    )?)
}
