//! SQL types → Arrow types, including Flink's `ROW<…>`, `ARRAY<…>`, `MAP<…>`, `STRING`,
//! `BYTES`, `TIMESTAMP(p)` and `TIMESTAMP_LTZ(p)` / `TIMESTAMP(p) WITH LOCAL TIME ZONE`.

use arrow::datatypes::{DataType, Field, Fields, TimeUnit};
use sqlparser::ast::{DataType as SqlType, ExactNumberInfo};
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;
use std::sync::Arc;

fn word_is(tok: &Token, word: &str) -> bool {
    matches!(tok, Token::Word(w) if w.value.eq_ignore_ascii_case(word) && w.quote_style.is_none())
}

pub fn unit_for_precision(p: Option<u64>) -> TimeUnit {
    match p.unwrap_or(6) {
        0 => TimeUnit::Second,
        1..=3 => TimeUnit::Millisecond,
        4..=6 => TimeUnit::Microsecond,
        _ => TimeUnit::Nanosecond,
    }
}

/// Parses a column type at the parser's position. `pending_gt` counts `>` already
/// consumed as part of a `>>` token that closed a nested type.
pub fn parse_type(p: &mut Parser, pending_gt: &mut usize) -> Result<DataType, ParserError> {
    let tok = p.peek_token().token;
    if word_is(&tok, "ROW") {
        p.next_token();
        let angle = if p.consume_token(&Token::Lt) {
            true
        } else {
            p.expect_token(&Token::LParen)?;
            false
        };
        let mut fields = Vec::new();
        loop {
            let name = p.parse_identifier()?;
            let dt = parse_type(p, pending_gt)?;
            let nullable = !p.parse_keywords(&[Keyword::NOT, Keyword::NULL]);
            if let Token::SingleQuotedString(_) = p.peek_token().token {
                p.next_token(); // field comment
            }
            fields.push(Field::new(name.value, dt, nullable));
            if *pending_gt > 0 || !p.consume_token(&Token::Comma) {
                break;
            }
        }
        if angle {
            close_angle(p, pending_gt)?;
        } else {
            p.expect_token(&Token::RParen)?;
        }
        return Ok(DataType::Struct(Fields::from(fields)));
    }
    if (word_is(&tok, "ARRAY") || word_is(&tok, "MULTISET"))
        && p.peek_nth_token(1).token == Token::Lt
    {
        p.next_token();
        p.next_token();
        let inner = parse_type(p, pending_gt)?;
        close_angle(p, pending_gt)?;
        return Ok(DataType::List(Arc::new(Field::new("element", inner, true))));
    }
    if word_is(&tok, "MAP") && p.peek_nth_token(1).token == Token::Lt {
        p.next_token();
        p.next_token();
        let key = parse_type(p, pending_gt)?;
        p.expect_token(&Token::Comma)?;
        let value = parse_type(p, pending_gt)?;
        close_angle(p, pending_gt)?;
        let entries = Field::new(
            "entries",
            DataType::Struct(Fields::from(vec![
                Field::new("key", key, false),
                Field::new("value", value, true),
            ])),
            false,
        );
        return Ok(DataType::Map(Arc::new(entries), false));
    }
    if word_is(&tok, "STRING") {
        p.next_token();
        return Ok(DataType::Utf8);
    }
    if word_is(&tok, "BYTES") {
        p.next_token();
        return Ok(DataType::Binary);
    }
    if word_is(&tok, "TIMESTAMP") || word_is(&tok, "TIMESTAMP_LTZ") {
        let ltz = word_is(&tok, "TIMESTAMP_LTZ");
        p.next_token();
        let precision = parse_precision(p)?;
        let mut tz = ltz;
        if p.parse_keywords(&[Keyword::WITH, Keyword::LOCAL, Keyword::TIME, Keyword::ZONE])
            || p.parse_keywords(&[Keyword::WITH, Keyword::TIME, Keyword::ZONE])
        {
            tz = true;
        } else {
            let _ = p.parse_keywords(&[Keyword::WITHOUT, Keyword::TIME, Keyword::ZONE]);
        }
        let unit = unit_for_precision(precision);
        return Ok(DataType::Timestamp(unit, tz.then(|| "UTC".into())));
    }
    let start = p.peek_token();
    let sql_type = p.parse_data_type()?;
    convert(&sql_type).map_err(|msg| {
        ParserError::ParserError(format!(
            "{msg} at Line: {}, Column: {}",
            start.span.start.line, start.span.start.column
        ))
    })
}

fn parse_precision(p: &mut Parser) -> Result<Option<u64>, ParserError> {
    if p.consume_token(&Token::LParen) {
        let tok = p.next_token();
        let Token::Number(n, _) = &tok.token else {
            return p.expected("a precision", tok);
        };
        let n = n
            .parse::<u64>()
            .map_err(|e| ParserError::ParserError(e.to_string()))?;
        p.expect_token(&Token::RParen)?;
        Ok(Some(n))
    } else {
        Ok(None)
    }
}

fn close_angle(p: &mut Parser, pending_gt: &mut usize) -> Result<(), ParserError> {
    if *pending_gt > 0 {
        *pending_gt -= 1;
        return Ok(());
    }
    let tok = p.next_token();
    match tok.token {
        Token::Gt => Ok(()),
        Token::ShiftRight => {
            *pending_gt += 1;
            Ok(())
        }
        _ => p.expected("'>'", tok),
    }
}

/// Converts a standard SQL type.
pub fn convert(t: &SqlType) -> Result<DataType, String> {
    use SqlType as S;
    Ok(match t {
        S::Boolean | S::Bool => DataType::Boolean,
        S::TinyInt(_) => DataType::Int8,
        S::SmallInt(_) | S::Int2(_) => DataType::Int16,
        S::Int(_) | S::Integer(_) | S::Int4(_) | S::Int32 => DataType::Int32,
        S::BigInt(_) | S::Int8(_) | S::Int64 => DataType::Int64,
        S::Float(ExactNumberInfo::Precision(p)) if *p > 24 => DataType::Float64,
        S::Float(_) | S::Real | S::Float4 | S::Float32 => DataType::Float32,
        S::Double(_) | S::DoublePrecision | S::Float8 | S::Float64 => DataType::Float64,
        S::Char(_)
        | S::Character(_)
        | S::Varchar(_)
        | S::CharVarying(_)
        | S::CharacterVarying(_)
        | S::Nvarchar(_)
        | S::Text
        | S::String(_) => DataType::Utf8,
        S::Binary(_) | S::Varbinary(_) | S::Bytea | S::Blob(_) | S::Bytes(_) => DataType::Binary,
        S::Decimal(info) | S::Numeric(info) | S::Dec(info) => {
            let (p, s) = match info {
                ExactNumberInfo::None => (10, 0),
                ExactNumberInfo::Precision(p) => (*p, 0),
                ExactNumberInfo::PrecisionAndScale(p, s) => (*p, *s),
            };
            if p == 0 || p > 38 {
                return Err(format!(
                    "DECIMAL precision must be between 1 and 38, got {p}"
                ));
            }
            DataType::Decimal128(p as u8, s as i8)
        }
        S::Date => DataType::Date32,
        S::Time(_, _) => DataType::Time64(TimeUnit::Microsecond),
        S::Timestamp(p, _) => DataType::Timestamp(unit_for_precision(*p), None),
        other => return Err(format!("unsupported column type {other}")),
    })
}

/// The type a table column gets for a query column of type `dt` (CREATE TABLE … AS
/// SELECT): one DDL can spell, so views, large and dictionary types become plain ones.
pub fn storable(dt: &DataType) -> DataType {
    match dt {
        DataType::Utf8View | DataType::LargeUtf8 | DataType::Null => DataType::Utf8,
        DataType::BinaryView | DataType::LargeBinary => DataType::Binary,
        DataType::Dictionary(_, value) => storable(value),
        DataType::List(f) | DataType::LargeList(f) | DataType::ListView(f) => DataType::List(
            std::sync::Arc::new(f.as_ref().clone().with_data_type(storable(f.data_type()))),
        ),
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|f| f.as_ref().clone().with_data_type(storable(f.data_type())))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Flink's name of an Arrow type (for DESCRIBE and messages).
pub fn sql_name(dt: &DataType) -> String {
    match dt {
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INT".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::Float32 => "FLOAT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "STRING".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "BYTES".into(),
        DataType::Decimal128(p, s) => format!("DECIMAL({p}, {s})"),
        DataType::Date32 => "DATE".into(),
        DataType::Timestamp(u, tz) => {
            let p = match u {
                TimeUnit::Second => 0,
                TimeUnit::Millisecond => 3,
                TimeUnit::Microsecond => 6,
                TimeUnit::Nanosecond => 9,
            };
            if tz.is_some() {
                format!("TIMESTAMP_LTZ({p})")
            } else {
                format!("TIMESTAMP({p})")
            }
        }
        DataType::Struct(fields) => format!(
            "ROW<{}>",
            fields
                .iter()
                .map(|f| format!("`{}` {}", f.name(), sql_name(f.data_type())))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        DataType::List(f) => format!("ARRAY<{}>", sql_name(f.data_type())),
        DataType::Map(..) if crate::flink_collect::is_multiset(dt).is_some() => format!(
            "MULTISET<{}>",
            sql_name(crate::flink_collect::is_multiset(dt).expect("a multiset"))
        ),
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => format!(
                "MAP<{}, {}>",
                sql_name(kv[0].data_type()),
                sql_name(kv[1].data_type())
            ),
            other => other.to_string(),
        },
        other => other.to_string(),
    }
}
