//! Change-data-capture formats read as changelogs, as Flink reads them: `debezium-json`
//! (`op` `c`/`r` → `+I` after, `u` → `-U` before and `+U` after, `d` → `-D` before; an
//! envelope with `schema` and `payload` is unwrapped), `canal-json` (`type` `INSERT`,
//! `UPDATE`, `DELETE` over the `data` rows; an update's `old` holds the changed fields of
//! the row before) and `maxwell-json` (`type` `insert`/`update`/`delete` of one `data`
//! row, `old` as in canal). Other messages (DDL, heartbeats) are skipped.

use super::format::{Decoded, JsonOptions};
use arrow::datatypes::SchemaRef;
use serde_json::{Map, Value};
use std::sync::Arc;
use weir_common::changelog::{self, RowKind};
use weir_common::{Error, Result};

/// The change-data-capture dialects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cdc {
    Debezium,
    Canal,
    Maxwell,
}

impl Cdc {
    pub fn name(self) -> &'static str {
        match self {
            Cdc::Debezium => "debezium-json",
            Cdc::Canal => "canal-json",
            Cdc::Maxwell => "maxwell-json",
        }
    }
}

type Rows = Vec<(RowKind, Map<String, Value>)>;

fn object(v: Option<&Value>) -> Option<Map<String, Value>> {
    match v {
        Some(Value::Object(m)) => Some(m.clone()),
        _ => None,
    }
}

/// `row` with the fields of `old` put back: the row before an update.
fn before_of(row: &Map<String, Value>, old: Option<&Value>) -> Map<String, Value> {
    let mut before = row.clone();
    if let Some(Value::Object(old)) = old {
        for (k, v) in old {
            before.insert(k.clone(), v.clone());
        }
    }
    before
}

/// The changes one message stands for (empty for messages that carry none).
fn changes(cdc: Cdc, message: &Value) -> std::result::Result<Rows, String> {
    let mut rows = Rows::new();
    match cdc {
        Cdc::Debezium => {
            let m = match message.get("payload") {
                Some(p) if message.get("op").is_none() => p,
                _ => message,
            };
            let (before, after) = (object(m.get("before")), object(m.get("after")));
            match m.get("op").and_then(Value::as_str) {
                Some("c" | "r") => rows.push((RowKind::Insert, after.ok_or("no 'after'")?)),
                Some("u") => {
                    let before = before.ok_or(
                        "the 'before' field of an UPDATE message is null (a Debezium Postgres \
                         table needs REPLICA IDENTITY FULL)",
                    )?;
                    rows.push((RowKind::UpdateBefore, before));
                    rows.push((RowKind::UpdateAfter, after.ok_or("no 'after'")?));
                }
                Some("d") => rows.push((RowKind::Delete, before.ok_or("no 'before'")?)),
                Some(other) => return Err(format!("unknown operation '{other}'")),
                None => return Err("no 'op' field".into()),
            }
        }
        Cdc::Canal => {
            let kind = message.get("type").and_then(Value::as_str).unwrap_or("");
            let data = match message.get("data") {
                Some(Value::Array(rows)) => rows.clone(),
                Some(Value::Null) | None => Vec::new(),
                Some(_) => return Err("'data' is not an array".into()),
            };
            let old = match message.get("old") {
                Some(Value::Array(rows)) => rows.clone(),
                _ => Vec::new(),
            };
            for (i, row) in data.iter().enumerate() {
                let row = object(Some(row)).ok_or("a 'data' row is not an object")?;
                match kind {
                    "INSERT" => rows.push((RowKind::Insert, row)),
                    "DELETE" => rows.push((RowKind::Delete, row)),
                    "UPDATE" => {
                        rows.push((RowKind::UpdateBefore, before_of(&row, old.get(i))));
                        rows.push((RowKind::UpdateAfter, row));
                    }
                    _ => {} // DDL and other messages carry no rows
                }
            }
        }
        Cdc::Maxwell => {
            let kind = message.get("type").and_then(Value::as_str).unwrap_or("");
            let Some(row) = object(message.get("data")) else {
                return Ok(rows);
            };
            match kind {
                "insert" => rows.push((RowKind::Insert, row)),
                "delete" => rows.push((RowKind::Delete, row)),
                "update" => {
                    rows.push((RowKind::UpdateBefore, before_of(&row, message.get("old"))));
                    rows.push((RowKind::UpdateAfter, row));
                }
                _ => {}
            }
        }
    }
    Ok(rows)
}

/// A file of change messages (one JSON object per line) as a changelog of `schema`.
pub fn decode(
    cdc: Cdc,
    o: &JsonOptions,
    name: &str,
    bytes: &[u8],
    schema: &SchemaRef,
) -> Result<Decoded> {
    let mut out = Decoded::default();
    let mut kinds = Vec::new();
    let mut rows = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        let line_no = i as u64 + 1;
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let parsed = serde_json::from_slice::<Value>(line)
            .map_err(|e| e.to_string())
            .and_then(|m| match m {
                // A tombstone (Kafka's delete marker) carries no change.
                Value::Null => Ok(Rows::new()),
                m => changes(cdc, &m),
            });
        match parsed {
            Ok(changes) => {
                for (kind, row) in changes {
                    kinds.push(kind);
                    rows.push(Value::Object(row));
                }
            }
            Err(why) if o.ignore_parse_errors => {
                out.skipped
                    .add(line_no, || format!("line {line_no}: {why}"));
            }
            Err(why) => {
                return Err(Error::input(format!(
                    "cannot read '{name}' as {}: line {line_no}: {why}",
                    cdc.name()
                )));
            }
        }
    }
    if rows.is_empty() {
        return Ok(out);
    }
    let mut text = Vec::new();
    for row in &rows {
        serde_json::to_writer(&mut text, row)?;
        text.push(b'\n');
    }
    let data = super::format::decode_json(o, name, &text.into(), schema)?;
    out.skipped.count += data.skipped.count;
    let data = arrow::compute::concat_batches(schema, &data.batches)?;
    if data.num_rows() != kinds.len() {
        return Err(Error::input(format!(
            "cannot read '{name}' as {}: some rows do not decode",
            cdc.name()
        )));
    }
    let ops: arrow::array::Int8Array = kinds.iter().map(|k| Some(*k as i8)).collect();
    out.batches.push(changelog::attach(&data, Arc::new(ops))?);
    Ok(out)
}
