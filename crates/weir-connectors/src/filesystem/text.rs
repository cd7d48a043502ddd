//! Values as Flink's `json` and `csv` formats write them, so that files Weir writes are
//! the files Flink writes: timestamps `yyyy-MM-dd HH:mm:ss[.fff]` (fraction without
//! trailing zeros, `T` instead of the space with `ISO-8601`, a `Z` after a
//! `TIMESTAMP_LTZ`), doubles as Java writes them (`1.0E20`), decimals as Java's
//! `BigDecimal.stripTrailingZeros()` (`1.5`, `1E+2`), bytes in base64, explicit JSON
//! nulls, and csv fields quoted as Jackson quotes them.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, TimeUnit,
    UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use base64::Engine as _;
use weir_common::{Error, Result, java_text};

/// How a JSON map with a NULL key is written (`json.map-null-key.mode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapNullKey {
    Fail,
    Drop,
    Literal(String),
}

/// What Flink's format options change in the text of values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextOptions {
    /// `ISO-8601` timestamps (`T` between date and time) instead of `SQL`.
    pub iso_timestamps: bool,
    pub map_null_key: MapNullKey,
    /// `csv.array-element-delimiter`.
    pub array_delimiter: String,
    /// `csv.null-literal`: the text of a NULL field (default: nothing).
    pub null_literal: Option<String>,
}

impl Default for TextOptions {
    fn default() -> Self {
        Self {
            iso_timestamps: false,
            map_null_key: MapNullKey::Fail,
            array_delimiter: ";".into(),
            null_literal: None,
        }
    }
}

/// A value's text: a JSON number/literal, or a string (quoted in JSON).
enum Text {
    Bare(String),
    Str(String),
}

fn unit_nanos(unit: &TimeUnit, v: i64) -> (i64, u32) {
    let per = match unit {
        TimeUnit::Second => 1,
        TimeUnit::Millisecond => 1_000,
        TimeUnit::Microsecond => 1_000_000,
        TimeUnit::Nanosecond => 1_000_000_000,
    };
    let secs = v.div_euclid(per);
    let sub = v.rem_euclid(per) as u64 * (1_000_000_000 / per as u64);
    (secs, sub as u32)
}

/// `.fff` without trailing zeros (nothing when 0).
fn fraction(nanos: u32) -> String {
    if nanos == 0 {
        return String::new();
    }
    let digits = format!("{nanos:09}");
    format!(".{}", digits.trim_end_matches('0'))
}

/// The text of a non-nested value (`None` for NULL).
fn scalar(a: &ArrayRef, i: usize, o: &TextOptions) -> Result<Option<Text>> {
    if a.is_null(i) {
        return Ok(None);
    }
    macro_rules! int {
        ($t:ty) => {
            Text::Bare(a.as_primitive::<$t>().value(i).to_string())
        };
    }
    Ok(Some(match a.data_type() {
        DataType::Boolean => Text::Bare(a.as_boolean().value(i).to_string()),
        DataType::Int8 => int!(Int8Type),
        DataType::Int16 => int!(Int16Type),
        DataType::Int32 => int!(Int32Type),
        DataType::Int64 => int!(Int64Type),
        DataType::UInt8 => int!(UInt8Type),
        DataType::UInt16 => int!(UInt16Type),
        DataType::UInt32 => int!(UInt32Type),
        DataType::UInt64 => int!(UInt64Type),
        DataType::Float32 => Text::Bare(java_text::float(a.as_primitive::<Float32Type>().value(i))),
        DataType::Float64 => {
            Text::Bare(java_text::double(a.as_primitive::<Float64Type>().value(i)))
        }
        DataType::Decimal128(_, s) => Text::Bare(java_text::big_decimal_stripped(
            a.as_primitive::<arrow::datatypes::Decimal128Type>()
                .value(i),
            *s,
        )),
        DataType::Utf8 => Text::Str(a.as_string::<i32>().value(i).to_string()),
        DataType::LargeUtf8 => Text::Str(a.as_string::<i64>().value(i).to_string()),
        DataType::Utf8View => Text::Str(a.as_string_view().value(i).to_string()),
        DataType::Binary => Text::Str(
            base64::engine::general_purpose::STANDARD.encode(a.as_binary::<i32>().value(i)),
        ),
        DataType::LargeBinary => Text::Str(
            base64::engine::general_purpose::STANDARD.encode(a.as_binary::<i64>().value(i)),
        ),
        DataType::Date32 => {
            let d = a
                .as_primitive::<arrow::datatypes::Date32Type>()
                .value_as_date(i);
            Text::Str(d.map(|d| date_text(&d)).unwrap_or_default())
        }
        DataType::Timestamp(unit, tz) => {
            let v = match unit {
                TimeUnit::Second => a
                    .as_primitive::<arrow::datatypes::TimestampSecondType>()
                    .value(i),
                TimeUnit::Millisecond => a
                    .as_primitive::<arrow::datatypes::TimestampMillisecondType>()
                    .value(i),
                TimeUnit::Microsecond => a
                    .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
                    .value(i),
                TimeUnit::Nanosecond => a
                    .as_primitive::<arrow::datatypes::TimestampNanosecondType>()
                    .value(i),
            };
            let (secs, nanos) = unit_nanos(unit, v);
            let t = chrono::DateTime::from_timestamp(secs, nanos)
                .ok_or_else(|| Error::input(format!("timestamp {v} is out of range")))?
                .naive_utc();
            let sep = if o.iso_timestamps { "T" } else { " " };
            let zone = if tz.is_some() { "Z" } else { "" };
            use chrono::Timelike;
            Text::Str(format!(
                "{}{sep}{:02}:{:02}:{:02}{}{zone}",
                date_text(&t.date()),
                t.hour(),
                t.minute(),
                t.second(),
                fraction(nanos)
            ))
        }
        DataType::Time32(unit) | DataType::Time64(unit) => {
            use arrow::datatypes::{
                Time32MillisecondType, Time32SecondType, Time64MicrosecondType,
                Time64NanosecondType,
            };
            let t = match unit {
                TimeUnit::Second => a.as_primitive::<Time32SecondType>().value_as_time(i),
                TimeUnit::Millisecond => a.as_primitive::<Time32MillisecondType>().value_as_time(i),
                TimeUnit::Microsecond => a.as_primitive::<Time64MicrosecondType>().value_as_time(i),
                TimeUnit::Nanosecond => a.as_primitive::<Time64NanosecondType>().value_as_time(i),
            }
            .ok_or_else(|| Error::input("a TIME value is out of range"))?;
            use chrono::Timelike;
            Text::Str(format!(
                "{:02}:{:02}:{:02}{}",
                t.hour(),
                t.minute(),
                t.second(),
                fraction(t.nanosecond())
            ))
        }
        other => {
            return Err(Error::input(format!(
                "type {other} cannot be written as text"
            )));
        }
    }))
}

/// `yyyy-MM-dd`, as chrono's `%Y-%m-%d` writes it, without parsing a format string per
/// value (a hot spot of JSON and CSV sinks).
fn date_text(d: &chrono::NaiveDate) -> String {
    use chrono::Datelike;
    if (0..=9999).contains(&d.year()) {
        format!("{:04}-{:02}-{:02}", d.year(), d.month(), d.day())
    } else {
        d.format("%Y-%m-%d").to_string()
    }
}

fn json_string(s: &str, out: &mut String) {
    java_text::json_string(s, out);
}

/// Row `i` of `a` as JSON.
fn json_value(a: &ArrayRef, i: usize, o: &TextOptions, out: &mut String) -> Result<()> {
    if a.is_null(i) {
        out.push_str("null");
        return Ok(());
    }
    match a.data_type() {
        DataType::List(_) | DataType::LargeList(_) => {
            let items = match a.data_type() {
                DataType::List(_) => a.as_list::<i32>().value(i),
                _ => a.as_list::<i64>().value(i),
            };
            out.push('[');
            for k in 0..items.len() {
                if k > 0 {
                    out.push(',');
                }
                json_value(&items, k, o, out)?;
            }
            out.push(']');
        }
        DataType::Struct(fields) => {
            let s = a.as_struct();
            out.push('{');
            for (k, f) in fields.iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                json_string(f.name(), out);
                out.push(':');
                json_value(s.column(k), i, o, out)?;
            }
            out.push('}');
        }
        DataType::Map(..) => {
            let entries = a.as_map().value(i);
            out.push('{');
            let mut first = true;
            for k in 0..entries.len() {
                let key = match scalar(entries.column(0), k, o)? {
                    Some(Text::Str(s) | Text::Bare(s)) => s,
                    None => match &o.map_null_key {
                        MapNullKey::Fail => {
                            return Err(Error::input(
                                "a map has a NULL key (set 'json.map-null-key.mode' to 'DROP' or \
                                 'LITERAL')",
                            ));
                        }
                        MapNullKey::Drop => continue,
                        MapNullKey::Literal(l) => l.clone(),
                    },
                };
                if !first {
                    out.push(',');
                }
                first = false;
                json_string(&key, out);
                out.push(':');
                json_value(entries.column(1), k, o, out)?;
            }
            out.push('}');
        }
        _ => match scalar(a, i, o)? {
            None => out.push_str("null"),
            Some(Text::Bare(t)) => out.push_str(&t),
            Some(Text::Str(s)) => json_string(&s, out),
        },
    }
    Ok(())
}

/// The rows of `batch` as JSON lines (every column, NULLs written as `null`).
pub fn json_lines(batch: &RecordBatch, o: &TextOptions, out: &mut Vec<u8>) -> Result<()> {
    let mut line = String::new();
    let schema = batch.schema();
    for i in 0..batch.num_rows() {
        line.clear();
        line.push('{');
        for (k, f) in schema.fields().iter().enumerate() {
            if k > 0 {
                line.push(',');
            }
            json_string(f.name(), &mut line);
            line.push(':');
            json_value(batch.column(k), i, o, &mut line)?;
        }
        line.push_str("}\n");
        out.extend_from_slice(line.as_bytes());
    }
    Ok(())
}

/// How Flink's csv format (Jackson) separates and quotes fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CsvLayout {
    pub delimiter: u8,
    /// `None`: `csv.disable-quote-character`.
    pub quote: Option<u8>,
    pub escape: Option<u8>,
}

impl CsvLayout {
    /// Jackson quotes a text value that holds any character below the highest special
    /// one (separator, quote, escape, line feed) + 1: with `,` that is every control
    /// character, the space and `!"#$%&'()*+,`.
    fn min_safe_char(&self) -> u32 {
        [Some(self.delimiter), self.quote, self.escape, Some(b'\n')]
            .into_iter()
            .flatten()
            .max()
            .map_or(0, |c| c as u32 + 1)
    }

    fn field(&self, text: Text, out: &mut String) {
        let s = match text {
            Text::Bare(s) => {
                out.push_str(&s);
                return;
            }
            Text::Str(s) => s,
        };
        let min_safe = self.min_safe_char();
        match self.quote {
            Some(q) if s.chars().any(|c| (c as u32) < min_safe) => {
                let q = q as char;
                out.push(q);
                for c in s.chars() {
                    if c == q {
                        out.push(q);
                    }
                    out.push(c);
                }
                out.push(q);
            }
            _ => out.push_str(&s),
        }
    }
}

/// The rows of `batch` as csv lines; `header` writes the column names first.
pub fn csv_lines(
    batch: &RecordBatch,
    layout: CsvLayout,
    header: bool,
    o: &TextOptions,
    out: &mut Vec<u8>,
) -> Result<()> {
    let delimiter = layout.delimiter as char;
    let mut line = String::new();
    if header {
        for (k, f) in batch.schema().fields().iter().enumerate() {
            if k > 0 {
                line.push(delimiter);
            }
            layout.field(Text::Str(f.name().clone()), &mut line);
        }
        line.push('\n');
        out.extend_from_slice(line.as_bytes());
    }
    for i in 0..batch.num_rows() {
        line.clear();
        for (k, column) in batch.columns().iter().enumerate() {
            if k > 0 {
                line.push(delimiter);
            }
            let text = match column.data_type() {
                DataType::List(_) if !column.is_null(i) => {
                    let items = column.as_list::<i32>().value(i);
                    let mut parts = Vec::with_capacity(items.len());
                    for e in 0..items.len() {
                        parts.push(match scalar(&items, e, o)? {
                            Some(Text::Bare(s) | Text::Str(s)) => s,
                            None => String::new(),
                        });
                    }
                    Some(Text::Str(parts.join(&o.array_delimiter)))
                }
                DataType::Struct(_) | DataType::Map(..) => {
                    return Err(Error::input(format!(
                        "column '{}': the csv format cannot write {} values",
                        batch.schema().field(k).name(),
                        column.data_type()
                    )));
                }
                _ => scalar(column, i, o)?,
            };
            match (text, &o.null_literal) {
                (Some(text), _) => layout.field(text, &mut line),
                (None, Some(null)) => line.push_str(null),
                (None, None) => {}
            }
        }
        line.push('\n');
        out.extend_from_slice(line.as_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Decimal128Array, Float64Array, StringArray, TimestampMillisecondArray};
    use std::sync::Arc;

    fn batch() -> RecordBatch {
        RecordBatch::try_from_iter(vec![
            (
                "ts",
                Arc::new(TimestampMillisecondArray::from(vec![
                    Some(1704103200120),
                    None,
                ])) as ArrayRef,
            ),
            (
                "d",
                Arc::new(
                    Decimal128Array::from(vec![Some(10000), Some(150)])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
            ),
            ("f", Arc::new(Float64Array::from(vec![1e20, 0.1]))),
            (
                "s",
                Arc::new(StringArray::from(vec![Some("a,\"b"), Some("")])),
            ),
        ])
        .unwrap()
    }

    #[test]
    fn json_lines_are_flinks() {
        let mut out = Vec::new();
        json_lines(&batch(), &TextOptions::default(), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"ts\":\"2024-01-01 10:00:00.12\",\"d\":1E+2,\"f\":1.0E20,\"s\":\"a,\\\"b\"}\n\
             {\"ts\":null,\"d\":1.5,\"f\":0.1,\"s\":\"\"}\n"
        );
    }

    #[test]
    fn dates_are_written_as_chrono_writes_them() {
        for (y, m, d) in [
            (2024, 1, 5),
            (1, 12, 31),
            (9999, 2, 28),
            (-44, 3, 15),
            (12345, 6, 1),
        ] {
            let date = chrono::NaiveDate::from_ymd_opt(y, m, d).unwrap();
            assert_eq!(date_text(&date), date.format("%Y-%m-%d").to_string());
        }
    }

    #[test]
    fn csv_lines_are_flinks() {
        let mut out = Vec::new();
        let layout = CsvLayout {
            delimiter: b',',
            quote: Some(b'"'),
            escape: None,
        };
        csv_lines(&batch(), layout, false, &TextOptions::default(), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\"2024-01-01 10:00:00.12\",1E+2,1.0E20,\"a,\"\"b\"\n,1.5,0.1,\n"
        );
    }
}
