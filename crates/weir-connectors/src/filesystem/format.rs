//! File formats: parsing the `format` option, encoding batches, decoding files.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use std::sync::Arc;
use weir_common::{ConnectorOptions, Error, Result};

use super::cdc::Cdc;
use super::text::{self, CsvLayout, MapNullKey, TextOptions};

/// A file format with its options (Flink's keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    Parquet,
    Csv(CsvOptions),
    Json(JsonOptions),
    /// Flink's `debezium-json`: `{"before":…,"after":…,"op":"c"|"d"}` per row, so a sink
    /// can take the updates of a changelog (`+I`/`+U` as `c`, `-U`/`-D` as `d`).
    DebeziumJson(JsonOptions),
    /// Flink's `canal-json` and `maxwell-json` (read only): changelogs.
    CanalJson(JsonOptions),
    MaxwellJson(JsonOptions),
    /// Flink's `raw`: one `STRING` or `BYTES` column, one value per line.
    Raw,
    /// Flink's `avro` ([`super::avro`]).
    Avro(super::avro::AvroOptions),
}

/// The `csv.*` options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvOptions {
    pub layout: CsvLayout,
    /// `csv.ignore-first-line` (a Weir reading of it: the first line is a header, skipped
    /// when read and written by the sink).
    pub header: bool,
    /// `csv.allow-comments`: lines starting with `#` are skipped.
    pub allow_comments: bool,
    /// `csv.ignore-parse-errors`: a field that does not parse is NULL, a record that does
    /// not split into the table's fields is skipped (counted and logged).
    pub ignore_parse_errors: bool,
    /// How values are written; `text.null_literal` (`csv.null-literal`) is also the
    /// field text read as NULL.
    pub text: TextOptions,
}

/// The `json.*` options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonOptions {
    /// `json.ignore-parse-errors`: a field that does not decode is NULL, a line that is
    /// not a JSON object is skipped (counted and logged).
    pub ignore_parse_errors: bool,
    /// `json.fail-on-missing-field`: a missing field is an error (default: NULL).
    pub fail_on_missing_field: bool,
    pub text: TextOptions,
}

/// One character of a csv option.
fn one_char(options: &ConnectorOptions, key: &str, default: u8) -> Result<u8> {
    match options.get(key) {
        None => Ok(default),
        Some("\\t") => Ok(b'\t'),
        Some(d) if d.len() == 1 => Ok(d.as_bytes()[0]),
        Some(d) => Err(Error::config(format!(
            "table '{}': '{key}' must be one character, got '{d}'",
            options.table
        ))),
    }
}

impl JsonOptions {
    /// `prefix` is `json` or `debezium-json`.
    fn from_options(options: &ConnectorOptions, prefix: &str) -> Result<Self> {
        let key = |k: &str| format!("{prefix}.{k}");
        let iso_timestamps = match options.get(&key("timestamp-format.standard")) {
            None => false,
            Some(v) if v.eq_ignore_ascii_case("SQL") => false,
            Some(v) if v.eq_ignore_ascii_case("ISO-8601") => true,
            Some(v) => {
                return Err(Error::config(format!(
                    "table '{}': '{}' must be 'SQL' or 'ISO-8601', got '{v}'",
                    options.table,
                    key("timestamp-format.standard")
                )));
            }
        };
        let map_null_key = match options
            .get(&key("map-null-key.mode"))
            .map(str::to_ascii_uppercase)
            .as_deref()
        {
            None | Some("FAIL") => MapNullKey::Fail,
            Some("DROP") => MapNullKey::Drop,
            Some("LITERAL") => MapNullKey::Literal(
                options
                    .get(&key("map-null-key.literal"))
                    .unwrap_or("null")
                    .to_string(),
            ),
            Some(v) => {
                return Err(Error::config(format!(
                    "table '{}': '{}' must be FAIL, DROP or LITERAL, got '{v}'",
                    options.table,
                    key("map-null-key.mode")
                )));
            }
        };
        Ok(Self {
            ignore_parse_errors: options
                .get_bool(&key("ignore-parse-errors"))?
                .unwrap_or(false),
            fail_on_missing_field: options
                .get_bool(&key("fail-on-missing-field"))?
                .unwrap_or(false),
            text: TextOptions {
                iso_timestamps,
                map_null_key,
                ..TextOptions::default()
            },
        })
    }
}

impl CsvOptions {
    fn from_options(options: &ConnectorOptions) -> Result<Self> {
        let quote = if options
            .get_bool("csv.disable-quote-character")?
            .unwrap_or(false)
        {
            None
        } else {
            Some(one_char(options, "csv.quote-character", b'"')?)
        };
        let escape = match options.get("csv.escape-character") {
            None => None,
            Some(_) => Some(one_char(options, "csv.escape-character", b'\\')?),
        };
        Ok(Self {
            layout: CsvLayout {
                delimiter: one_char(options, "csv.field-delimiter", b',')?,
                quote,
                escape,
            },
            // Flink's csv has no header line: neither read nor written.
            header: options.get_bool("csv.ignore-first-line")?.unwrap_or(false),
            allow_comments: options.get_bool("csv.allow-comments")?.unwrap_or(false),
            ignore_parse_errors: options
                .get_bool("csv.ignore-parse-errors")?
                .unwrap_or(false),
            text: TextOptions {
                array_delimiter: options
                    .get("csv.array-element-delimiter")
                    .unwrap_or(";")
                    .to_string(),
                null_literal: options.get("csv.null-literal").map(str::to_string),
                ..TextOptions::default()
            },
        })
    }
}

/// Records or fields a decoder skipped (`*.ignore-parse-errors`): how many, and the
/// place and reason of the first in the file.
#[derive(Debug, Default)]
pub struct Skipped {
    pub count: u64,
    pub first: Option<String>,
    first_line: u64,
}

impl Skipped {
    pub(super) fn add(&mut self, line: u64, what: impl FnOnce() -> String) {
        self.count += 1;
        if self.first.is_none() || line < self.first_line {
            self.first = Some(what());
            self.first_line = line;
        }
    }
}

/// A decoded file: its rows, and what was skipped.
#[derive(Debug, Default)]
pub struct Decoded {
    pub batches: Vec<RecordBatch>,
    pub skipped: Skipped,
}

impl Format {
    pub fn from_options(options: &ConnectorOptions) -> Result<Self> {
        let format = options.required("format")?;
        match format.to_ascii_lowercase().as_str() {
            "parquet" => Ok(Format::Parquet),
            "json" => Ok(Format::Json(JsonOptions::from_options(options, "json")?)),
            "debezium-json" => Ok(Format::DebeziumJson(JsonOptions::from_options(
                options,
                "debezium-json",
            )?)),
            "canal-json" => Ok(Format::CanalJson(JsonOptions::from_options(
                options,
                "canal-json",
            )?)),
            "maxwell-json" => Ok(Format::MaxwellJson(JsonOptions::from_options(
                options,
                "maxwell-json",
            )?)),
            "csv" => Ok(Format::Csv(CsvOptions::from_options(options)?)),
            "avro" => Ok(Format::Avro(super::avro::AvroOptions::from_options(
                options,
            )?)),
            "raw" => {
                if let Some(c) = options.get("raw.charset")
                    && !c.eq_ignore_ascii_case("UTF-8")
                {
                    return Err(Error::config(format!(
                        "table '{}': 'raw.charset' '{c}' is not supported (UTF-8 is)",
                        options.table
                    )));
                }
                Ok(Format::Raw)
            }
            other => Err(Error::config(format!(
                "table '{}': unknown format '{other}'; supported formats: parquet, csv, json, \
                 avro, debezium-json, canal-json, maxwell-json, raw",
                options.table
            ))),
        }
    }

    pub fn extension(&self) -> &'static str {
        match self {
            Format::Parquet => "parquet",
            Format::Csv(_) => "csv",
            Format::Raw => "txt",
            Format::Avro(_) => "avro",
            Format::Json(_)
            | Format::DebeziumJson(_)
            | Format::CanalJson(_)
            | Format::MaxwellJson(_) => "json",
        }
    }

    /// Whether files of this format can hold updates (`-U`, `+U`, `-D` rows).
    pub fn takes_changelog(&self) -> bool {
        matches!(self, Format::DebeziumJson(_) | Format::CanalJson(_))
    }

    /// Whether decoded rows are a changelog (the CDC formats: each carries its change).
    pub fn is_changelog_source(&self) -> bool {
        matches!(
            self,
            Format::DebeziumJson(_) | Format::CanalJson(_) | Format::MaxwellJson(_)
        )
    }

    /// Decodes a whole file into batches of `schema` (columns matched by name for Parquet).
    pub fn decode(&self, name: &str, bytes: Bytes, schema: &SchemaRef) -> Result<Decoded> {
        let bad = |e: &dyn std::fmt::Display| Error::input(format!("cannot read '{name}': {e}"));
        match self {
            Format::Parquet => {
                let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
                    .map_err(|e| bad(&e))?
                    .with_batch_size(8192)
                    .build()
                    .map_err(|e| bad(&e))?;
                let mut out = Decoded::default();
                for batch in reader {
                    let batch = batch.map_err(|e| bad(&e))?;
                    out.batches.push(conform(name, &batch, schema)?);
                }
                Ok(out)
            }
            Format::Csv(o) => decode_csv(o, name, &bytes, schema),
            Format::DebeziumJson(o) => super::cdc::decode(Cdc::Debezium, o, name, &bytes, schema),
            Format::CanalJson(o) => super::cdc::decode(Cdc::Canal, o, name, &bytes, schema),
            Format::MaxwellJson(o) => super::cdc::decode(Cdc::Maxwell, o, name, &bytes, schema),
            Format::Json(o) => decode_json(o, name, &bytes, schema),
            Format::Raw => decode_raw(name, &bytes, schema),
            Format::Avro(_) => Ok(Decoded {
                batches: super::avro::decode_file(name, bytes, schema)?,
                skipped: Skipped::default(),
            }),
        }
    }
}

/// The one column of a `raw` table: whether it is text (else bytes).
pub(crate) fn raw_column(schema: &SchemaRef) -> Result<bool> {
    use arrow::datatypes::DataType;
    match schema.fields().as_ref() {
        [f] if f.data_type() == &DataType::Utf8 => Ok(true),
        [f] if f.data_type() == &DataType::Binary => Ok(false),
        _ => Err(Error::config(
            "format 'raw' needs exactly one STRING or BYTES column",
        )),
    }
}

/// `raw`: each line (without its `\n`) is one value; an empty last line is no value.
fn decode_raw(name: &str, bytes: &[u8], schema: &SchemaRef) -> Result<Decoded> {
    let text = raw_column(schema)?;
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let lines: Vec<&[u8]> = if bytes.is_empty() {
        Vec::new()
    } else {
        body.split(|b| *b == b'\n').collect()
    };
    let column: ArrayRef = if text {
        let mut values = Vec::with_capacity(lines.len());
        for (i, line) in lines.iter().enumerate() {
            values.push(std::str::from_utf8(line).map_err(|e| {
                Error::input(format!(
                    "cannot read '{name}': line {}: not UTF-8: {e}",
                    i + 1
                ))
            })?);
        }
        Arc::new(arrow::array::StringArray::from(values))
    } else {
        Arc::new(arrow::array::BinaryArray::from(lines))
    };
    Ok(Decoded {
        batches: vec![RecordBatch::try_new(schema.clone(), vec![column])?],
        skipped: Skipped::default(),
    })
}

/// `raw` output: each value and a `\n` (NULL: an empty line).
fn raw_lines(batch: &RecordBatch, out: &mut Vec<u8>) {
    let column = batch.column(0);
    for i in 0..batch.num_rows() {
        if !column.is_null(i) {
            match column.data_type() {
                arrow::datatypes::DataType::Utf8 => {
                    out.extend_from_slice(column.as_string::<i32>().value(i).as_bytes())
                }
                _ => out.extend_from_slice(column.as_binary::<i32>().value(i)),
            }
        }
        out.push(b'\n');
    }
}

/// CSV: records split by the `csv` crate (quotes, escapes, comments; each record knows
/// its line), every field as text, then each column converted to its type as Flink
/// reads it: an empty field is an empty STRING (never NULL) and an error for other types;
/// the null literal is NULL; ARRAY fields split at the element delimiter.
fn decode_csv(o: &CsvOptions, name: &str, bytes: &[u8], schema: &SchemaRef) -> Result<Decoded> {
    use arrow::array::StringBuilder;
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(o.header)
        .delimiter(o.layout.delimiter)
        .quote(o.layout.quote.unwrap_or(b'"'))
        .quoting(o.layout.quote.is_some())
        .escape(o.layout.escape)
        .double_quote(o.layout.escape.is_none())
        .comment(o.allow_comments.then_some(b'#'))
        .flexible(true)
        .from_reader(bytes);
    let width = schema.fields().len();
    let mut out = Decoded::default();
    let mut columns: Vec<StringBuilder> = (0..width).map(|_| StringBuilder::new()).collect();
    let mut lines: Vec<u64> = Vec::new();
    let mut record = csv::StringRecord::new();
    let flush =
        |columns: &mut Vec<StringBuilder>, lines: &mut Vec<u64>, out: &mut Decoded| -> Result<()> {
            if lines.is_empty() {
                return Ok(());
            }
            let texts: Vec<ArrayRef> = columns
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef)
                .collect();
            let batch = typed_columns(o, name, &texts, lines, schema, &mut out.skipped)?;
            out.batches.push(batch);
            lines.clear();
            Ok(())
        };
    loop {
        let line = reader.position().line();
        match reader.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                if o.ignore_parse_errors {
                    out.skipped.add(line, || format!("line {line}: {e}"));
                    continue;
                }
                return Err(Error::input(format!(
                    "cannot read '{name}': line {line}: {e}"
                )));
            }
        }
        let line = record.position().map_or(line, |p| p.line());
        if record.len() != width {
            let why = || {
                format!(
                    "line {line}: {} fields, the table has {width} columns",
                    record.len()
                )
            };
            if !o.ignore_parse_errors {
                return Err(Error::input(format!("cannot read '{name}': {}", why())));
            }
            out.skipped.add(line, why);
            // As Flink: a record with too many fields is skipped, missing fields are NULL.
            if record.len() > width {
                continue;
            }
        }
        for (k, b) in columns.iter_mut().enumerate() {
            match record.get(k) {
                Some(field) if o.text.null_literal.as_deref() != Some(field) => {
                    b.append_value(field)
                }
                _ => b.append_null(),
            }
        }
        lines.push(line);
        if lines.len() == 8192 {
            flush(&mut columns, &mut lines, &mut out)?;
        }
    }
    flush(&mut columns, &mut lines, &mut out)?;
    Ok(out)
}

/// Text columns converted to the table's types (see [`decode_csv`]).
fn typed_columns(
    o: &CsvOptions,
    name: &str,
    texts: &[ArrayRef],
    lines: &[u64],
    schema: &SchemaRef,
    skipped: &mut Skipped,
) -> Result<RecordBatch> {
    use arrow::datatypes::DataType;
    let strict = arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    let convert = |text: &ArrayRef, target: &DataType| match target {
        DataType::Utf8 => Ok(text.clone()),
        DataType::List(element) => split_list(text, &o.text.array_delimiter, element, &strict),
        _ => arrow::compute::cast_with_options(text, target, &strict),
    };
    let mut columns = Vec::with_capacity(texts.len());
    for (text, field) in texts.iter().zip(schema.fields()) {
        let target = field.data_type();
        if let Ok(c) = convert(text, target) {
            columns.push(c);
            continue;
        }
        // Row by row, to name the first value that does not convert (and, ignoring
        // parse errors, to make each such field NULL).
        let strings = text.as_string::<i32>();
        let mut rows = Vec::with_capacity(text.len());
        for (i, line) in lines.iter().enumerate() {
            match convert(&text.slice(i, 1), target) {
                Ok(v) => rows.push(v),
                Err(_) => {
                    let why = || {
                        format!(
                            "line {}, column '{}': cannot parse '{}' as {}",
                            line,
                            field.name(),
                            strings.value(i),
                            sql_type(target)
                        )
                    };
                    if !o.ignore_parse_errors {
                        return Err(Error::input(format!("cannot read '{name}': {}", why())));
                    }
                    skipped.add(*line, why);
                    rows.push(arrow::array::new_null_array(target, 1));
                }
            }
        }
        let rows: Vec<&dyn Array> = rows.iter().map(|r| r.as_ref()).collect();
        columns.push(arrow::compute::concat(&rows)?);
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

fn sql_type(t: &arrow::datatypes::DataType) -> String {
    use arrow::datatypes::DataType::*;
    match t {
        Int8 => "TINYINT".into(),
        Int16 => "SMALLINT".into(),
        Int32 => "INT".into(),
        Int64 => "BIGINT".into(),
        Float32 => "FLOAT".into(),
        Float64 => "DOUBLE".into(),
        Boolean => "BOOLEAN".into(),
        Decimal128(p, s) => format!("DECIMAL({p}, {s})"),
        Date32 => "DATE".into(),
        Timestamp(..) => "TIMESTAMP".into(),
        List(f) => format!("ARRAY<{}>", sql_type(f.data_type())),
        other => other.to_string(),
    }
}

/// An ARRAY field: its text split at `delimiter`, each element converted.
fn split_list(
    text: &ArrayRef,
    delimiter: &str,
    element: &arrow::datatypes::FieldRef,
    options: &arrow::compute::CastOptions,
) -> std::result::Result<ArrayRef, arrow::error::ArrowError> {
    use arrow::array::{ListArray, StringArray};
    use arrow::buffer::OffsetBuffer;
    let strings = text.as_string::<i32>();
    let mut values: Vec<&str> = Vec::new();
    let mut lengths = Vec::with_capacity(strings.len());
    for i in 0..strings.len() {
        let s = strings.value(i);
        let before = values.len();
        if !strings.is_null(i) && !s.is_empty() {
            values.extend(s.split(delimiter));
        }
        lengths.push(values.len() - before);
    }
    let values: ArrayRef = Arc::new(StringArray::from(values));
    let values = arrow::compute::cast_with_options(&values, element.data_type(), options)?;
    Ok(Arc::new(ListArray::try_new(
        element.clone(),
        OffsetBuffer::from_lengths(lengths),
        values,
        strings.nulls().cloned(),
    )?))
}

/// JSON lines through arrow's reader; with `json.fail-on-missing-field` every line is
/// checked for every column first; with `json.ignore-parse-errors` a file that does not
/// decode is decoded line by line and field by field (a field that does not decode is
/// NULL, a line that is not an object is skipped).
pub(super) fn decode_json(
    o: &JsonOptions,
    name: &str,
    bytes: &Bytes,
    schema: &SchemaRef,
) -> Result<Decoded> {
    if o.fail_on_missing_field {
        for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
            if line.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            if let Ok(serde_json::Value::Object(m)) = serde_json::from_slice(line)
                && let Some(f) = schema.fields().iter().find(|f| !m.contains_key(f.name()))
            {
                return Err(Error::input(format!(
                    "cannot read '{name}': line {}: field '{}' is missing ('json.fail-on-missing-field' is true)",
                    i + 1,
                    f.name()
                )));
            }
        }
    }
    let whole = arrow::json::ReaderBuilder::new(schema.clone())
        .with_batch_size(8192)
        .build(std::io::Cursor::new(bytes.clone()))
        .and_then(|r| r.collect::<Result<Vec<_>, _>>());
    match whole {
        Ok(batches) => Ok(Decoded {
            batches,
            skipped: Skipped::default(),
        }),
        Err(e) if !o.ignore_parse_errors => Err(Error::input(format!(
            "cannot read '{name}': {}",
            json_error(bytes, schema, &e)
        ))),
        Err(_) => decode_json_leniently(bytes, schema),
    }
}

fn decode_one(text: &[u8], schema: &SchemaRef) -> Option<RecordBatch> {
    arrow::json::ReaderBuilder::new(schema.clone())
        .build(std::io::Cursor::new(text))
        .and_then(|r| r.collect::<Result<Vec<_>, _>>())
        .ok()
        .and_then(|b| arrow::compute::concat_batches(schema, &b).ok())
        .filter(|b| b.num_rows() == 1)
}

fn decode_json_leniently(bytes: &Bytes, schema: &SchemaRef) -> Result<Decoded> {
    let mut out = Decoded::default();
    let nullable = Arc::new(arrow::datatypes::Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    let mut rows = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        if let Some(row) = decode_one(line, schema) {
            rows.push(row);
            continue;
        }
        let Ok(serde_json::Value::Object(object)) = serde_json::from_slice(line) else {
            out.skipped.add(i as u64 + 1, || {
                format!("line {}: not a JSON object", i + 1)
            });
            continue;
        };
        // Field by field: each one that does not decode is NULL.
        let mut columns = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let one = Arc::new(arrow::datatypes::Schema::new(vec![
                field.as_ref().clone().with_nullable(true),
            ]));
            let value = object.get(field.name()).cloned().unwrap_or_default();
            let text = serde_json::json!({ field.name(): value }).to_string();
            match decode_one(text.as_bytes(), &one) {
                Some(b) => columns.push(b.column(0).clone()),
                None => {
                    out.skipped.add(i as u64 + 1, || {
                        format!("line {}, field '{}': cannot decode", i + 1, field.name())
                    });
                    columns.push(arrow::array::new_null_array(field.data_type(), 1));
                }
            }
        }
        let row = RecordBatch::try_new(nullable.clone(), columns)?;
        rows.push(
            RecordBatch::try_new(schema.clone(), row.columns().to_vec())
                .map_err(|e| Error::input(format!("line {}: {e}", i + 1)))?,
        );
    }
    out.batches
        .push(arrow::compute::concat_batches(schema, &rows)?);
    Ok(out)
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
pub(crate) fn conform(name: &str, batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
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
    Parquet(Box<ArrowWriter<Vec<u8>>>),
    Avro(super::avro::AvroFileWriter),
    /// csv and json lines as Flink writes them ([`super::text`]).
    Text {
        format: Format,
        out: Vec<u8>,
    },
}

impl PartEncoder {
    pub fn new(format: &Format, schema: &SchemaRef) -> Result<Self> {
        Ok(match format {
            Format::Parquet => {
                let props = WriterProperties::builder()
                    .set_compression(Compression::SNAPPY)
                    .build();
                PartEncoder::Parquet(Box::new(
                    ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props))
                        .map_err(parquet_error)?,
                ))
            }
            Format::Csv(o) => {
                let mut out = Vec::new();
                if o.header {
                    let empty = RecordBatch::new_empty(schema.clone());
                    text::csv_lines(&empty, o.layout, true, &o.text, &mut out)?;
                }
                PartEncoder::Text {
                    format: format.clone(),
                    out,
                }
            }
            Format::Raw => {
                raw_column(schema)?;
                PartEncoder::Text {
                    format: Format::Raw,
                    out: Vec::new(),
                }
            }
            Format::Avro(o) => {
                PartEncoder::Avro(super::avro::AvroLayout::new(schema)?.file_writer(o)?)
            }
            Format::Json(_) | Format::DebeziumJson(_) | Format::CanalJson(_) => PartEncoder::Text {
                format: format.clone(),
                out: Vec::new(),
            },
            Format::MaxwellJson(_) => {
                return Err(Error::config(
                    "format 'maxwell-json' can only be read; write changelogs as \
                     'debezium-json' or 'canal-json'",
                ));
            }
        })
    }

    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let changelog = weir_common::changelog::is_changelog(batch);
        match self {
            PartEncoder::Parquet(_) | PartEncoder::Avro(_) | PartEncoder::Text { .. }
                if changelog && !self.takes_changelog() =>
            {
                return Err(Error::internal(
                    "a changelog reached a file format that cannot hold updates",
                ));
            }
            PartEncoder::Parquet(w) => w.write(batch).map_err(parquet_error)?,
            PartEncoder::Avro(w) => w.write(batch)?,
            PartEncoder::Text { format, out } => match format {
                Format::Csv(o) => text::csv_lines(batch, o.layout, false, &o.text, out)?,
                Format::Raw => raw_lines(batch, out),
                Format::Json(o) => text::json_lines(batch, &o.text, out)?,
                Format::DebeziumJson(o) => text::json_lines(&debezium(batch)?, &o.text, out)?,
                Format::CanalJson(o) => text::json_lines(&canal(batch)?, &o.text, out)?,
                Format::Parquet | Format::Avro(_) | Format::MaxwellJson(_) => {
                    unreachable!("no text encoder is made for these")
                }
            },
        }
        Ok(())
    }

    fn takes_changelog(&self) -> bool {
        matches!(self, PartEncoder::Text { format, .. } if format.takes_changelog())
    }

    /// Bytes written so far (an estimate for Parquet, which buffers row groups).
    pub fn size(&self) -> usize {
        match self {
            PartEncoder::Parquet(w) => w.bytes_written() + w.in_progress_size(),
            PartEncoder::Avro(w) => w.size(),
            PartEncoder::Text { out, .. } => out.len(),
        }
    }

    pub fn finish(self) -> Result<Vec<u8>> {
        Ok(match self {
            PartEncoder::Parquet(w) => (*w).into_inner().map_err(parquet_error)?,
            PartEncoder::Avro(w) => w.finish()?,
            PartEncoder::Text { out, .. } => out,
        })
    }
}

/// Re-shapes a (changelog) batch as Canal messages, as Flink's `canal-json` writes them:
/// `data` holds the row alone, `type` is `INSERT` (`+I`, `+U`) or `DELETE` (`-U`, `-D`).
fn canal(batch: &RecordBatch) -> Result<RecordBatch> {
    use arrow::array::{ArrayRef, ListArray, StringArray, StructArray};
    use arrow::buffer::OffsetBuffer;
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;
    let (data, ops) = weir_common::changelog::split(batch);
    let rows = data.num_rows();
    let fields = data.schema().fields().clone();
    let row = Arc::new(Field::new(
        "element",
        DataType::Struct(fields.clone()),
        true,
    ));
    let values = StructArray::try_new(fields, data.columns().to_vec(), None)?;
    let list: ArrayRef = Arc::new(ListArray::try_new(
        row.clone(),
        OffsetBuffer::from_lengths(std::iter::repeat_n(1, rows)),
        Arc::new(values),
        None,
    )?);
    let kind: ArrayRef = Arc::new(StringArray::from_iter_values((0..rows).map(|i| {
        match weir_common::changelog::kind_at(ops.as_ref(), i).is_retraction() {
            true => "DELETE",
            false => "INSERT",
        }
    })));
    let schema = Arc::new(Schema::new(vec![
        Field::new("data", DataType::List(row), false),
        Field::new("type", DataType::Utf8, false),
    ]));
    Ok(RecordBatch::try_new(schema, vec![list, kind])?)
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
