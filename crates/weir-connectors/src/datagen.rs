//! `'connector' = 'datagen'`: deterministic generated rows, with Flink's option names.
//!
//! Every value is a pure function of (`seed`, column, global row index), so a restored
//! job regenerates exactly the rows it had not yet emitted. The rows are split into as
//! many splits as the first run's parallelism; split `k` of `P` produces global rows
//! `k, k + P, k + 2P, …` and checkpoints how many it emitted.
//!
//! Per column: `fields.<f>.kind` = `random` (default; `min`, `max`, `length`,
//! `null-rate`) or `sequence` (`start`, `end`: the value is `start + row`). Timestamps
//! are event times: `2024-01-01 00:00:00 UTC` plus the row index times
//! `1 s / rows-per-second`, so they increase with the row index.

use crate::split::{Split, mix};
use arrow::array::{
    ArrayRef, BooleanArray, Decimal128Array, Float64Array, Int64Array, RecordBatch, StringBuilder,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_common::{CheckpointId, ConnectorOptions, Error, Result};
use weir_runtime::{OperatorState, Source, SourceFactory, SourcePoll, TaskInfo};

pub const OPTIONS: &[&str] = &[
    "connector",
    "rows-per-second",
    "number-of-rows",
    "seed",
    "fields.#.kind",
    "fields.#.min",
    "fields.#.max",
    "fields.#.length",
    "fields.#.start",
    "fields.#.end",
    "fields.#.null-rate",
];

/// 2024-01-01T00:00:00Z in milliseconds.
const BASE_TIME_MS: i64 = 1_704_067_200_000;
const BATCH_ROWS: u64 = 8192;

#[derive(Debug, Clone)]
enum FieldKind {
    Random {
        min: Option<f64>,
        max: Option<f64>,
        length: usize,
    },
    Sequence {
        start: i64,
        end: i64,
    },
}

#[derive(Debug, Clone)]
struct FieldGen {
    kind: FieldKind,
    null_rate: f64,
}

/// Factory of the datagen source.
#[derive(Clone)]
pub struct DatagenSourceFactory {
    schema: SchemaRef,
    fields: Vec<FieldGen>,
    /// Per column, whether anything reads it (a batch scan's projection); unread nullable
    /// columns are left NULL instead of generated.
    used: Option<Vec<bool>>,
    rows_per_second: f64,
    total_rows: Option<u64>,
    seed: u64,
}

impl DatagenSourceFactory {
    pub fn new(options: &ConnectorOptions, schema: SchemaRef) -> Result<Self> {
        options.check_known("datagen", OPTIONS)?;
        for key in options.values.keys() {
            if let Some(name) = key
                .strip_prefix("fields.")
                .and_then(|k| k.rsplit_once('.'))
                .map(|(n, _)| n)
                && schema.field_with_name(name).is_err()
            {
                return Err(Error::config(format!(
                    "table '{}': option '{key}' names column '{name}', which the table does not have",
                    options.table
                )));
            }
        }
        let mut total_rows = options.get_u64("number-of-rows")?;
        let mut fields = Vec::new();
        for f in schema.fields() {
            let opt = |k: &str| format!("fields.{}.{k}", f.name());
            let kind = match options.get(&opt("kind")).unwrap_or("random") {
                "random" => {
                    let min = options.get_f64(&opt("min"))?;
                    let max = options.get_f64(&opt("max"))?;
                    if let (Some(lo), Some(hi)) = (min, max)
                        && lo > hi
                    {
                        return Err(Error::config(format!(
                            "table '{}': '{}' ({lo}) is greater than '{}' ({hi})",
                            options.table,
                            opt("min"),
                            opt("max")
                        )));
                    }
                    FieldKind::Random {
                        min,
                        max,
                        length: options.get_u64(&opt("length"))?.unwrap_or(100) as usize,
                    }
                }
                "sequence" => {
                    let start = options.get_i64(&opt("start"))?.ok_or_else(|| {
                        Error::config(format!(
                            "table '{}': sequence column '{}' needs '{}'",
                            options.table,
                            f.name(),
                            opt("start")
                        ))
                    })?;
                    let end = options.get_i64(&opt("end"))?.ok_or_else(|| {
                        Error::config(format!(
                            "table '{}': sequence column '{}' needs '{}'",
                            options.table,
                            f.name(),
                            opt("end")
                        ))
                    })?;
                    if end < start {
                        return Err(Error::config(format!(
                            "table '{}': '{}' must not be below '{}'",
                            options.table,
                            opt("end"),
                            opt("start")
                        )));
                    }
                    let n = (end - start + 1) as u64;
                    total_rows = Some(total_rows.map_or(n, |t| t.min(n)));
                    FieldKind::Sequence { start, end }
                }
                other => {
                    return Err(Error::config(format!(
                        "table '{}': '{}' = '{other}' is invalid: expected random or sequence",
                        options.table,
                        opt("kind")
                    )));
                }
            };
            check_supported(f.data_type(), f.name())?;
            let null_rate = options.get_f64(&opt("null-rate"))?.unwrap_or(0.0);
            fields.push(FieldGen { kind, null_rate });
        }
        let rows_per_second = options.get_f64("rows-per-second")?.unwrap_or(10_000.0);
        if rows_per_second <= 0.0 {
            return Err(Error::config(format!(
                "table '{}': 'rows-per-second' must be positive",
                options.table
            )));
        }
        Ok(Self {
            schema,
            fields,
            rows_per_second,
            total_rows,
            seed: options.get_u64("seed")?.unwrap_or(0),
            used: None,
        })
    }
}

fn check_supported(dt: &DataType, name: &str) -> Result<()> {
    use DataType::*;
    match dt {
        Int8
        | Int16
        | Int32
        | Int64
        | UInt8
        | UInt16
        | UInt32
        | UInt64
        | Float32
        | Float64
        | Boolean
        | Utf8
        | LargeUtf8
        | Utf8View
        | Date32
        | Decimal128(_, _)
        | Timestamp(_, _) => Ok(()),
        other => Err(Error::config(format!(
            "datagen cannot generate column '{name}' of type {other}"
        ))),
    }
}

impl SourceFactory for DatagenSourceFactory {
    fn name(&self) -> String {
        match self.total_rows {
            Some(n) => format!("Source: datagen ({n} rows)"),
            None => "Source: datagen (unbounded)".into(),
        }
    }
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn is_bounded(&self) -> bool {
        self.total_rows.is_some()
    }
    fn estimated_rows(&self) -> Option<u64> {
        self.total_rows
    }
    fn projected(&self, used: &[usize]) -> Option<Arc<dyn SourceFactory>> {
        let mut projected = self.clone();
        projected.used = Some((0..self.fields.len()).map(|c| used.contains(&c)).collect());
        Some(Arc::new(projected))
    }
    fn create(&self, task: &TaskInfo, restored: Option<OperatorState>) -> Result<Box<dyn Source>> {
        let splits = Split::load(task, restored)?;
        Ok(Box::new(DatagenSource {
            schema: self.schema.clone(),
            fields: self.fields.clone(),
            used: self.used.clone(),
            rate: self.rows_per_second * Split::share(&splits),
            interval_ms: (1000.0 / self.rows_per_second).max(0.0),
            total_rows: self.total_rows,
            seed: self.seed,
            splits,
            turn: 0,
            started: None,
            emitted: 0,
        }))
    }
}

struct DatagenSource {
    schema: SchemaRef,
    fields: Vec<FieldGen>,
    used: Option<Vec<bool>>,
    rate: f64,
    interval_ms: f64,
    total_rows: Option<u64>,
    seed: u64,
    splits: Vec<Split>,
    turn: usize,
    started: Option<Instant>,
    emitted: u64,
}

impl DatagenSource {
    fn generate(&self, s: &Split, rows: u64) -> Result<RecordBatch> {
        let rows_idx: Vec<u64> = (0..rows).map(|i| s.global(i)).collect();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.fields.len());
        for (c, (field, gen_)) in self.schema.fields().iter().zip(&self.fields).enumerate() {
            let unread = self.used.as_ref().is_some_and(|u| !u[c]);
            if unread && field.is_nullable() {
                columns.push(arrow::array::new_null_array(
                    field.data_type(),
                    rows as usize,
                ));
                continue;
            }
            let key = mix(self.seed ^ mix(c as u64 + 1));
            let h = |g: u64| mix(key ^ g);
            let null = |g: u64| {
                gen_.null_rate > 0.0
                    && (mix(h(g)) % 1_000_000) as f64 / 1_000_000.0 < gen_.null_rate
            };
            let dt = field.data_type();
            let array: ArrayRef = match dt {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                    let mut b = StringBuilder::with_capacity(rows as usize, rows as usize * 16);
                    for &g in &rows_idx {
                        if null(g) {
                            b.append_null();
                            continue;
                        }
                        match &gen_.kind {
                            FieldKind::Sequence { start, .. } => {
                                b.append_value((start + g as i64).to_string())
                            }
                            FieldKind::Random { length, .. } => {
                                let mut text = String::with_capacity(*length);
                                let mut state = h(g);
                                for i in 0..*length {
                                    if i % 10 == 0 {
                                        state = mix(state);
                                    }
                                    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
                                    text.push(
                                        ALPHABET[((state >> ((i % 10) * 6)) & 63) as usize % 36]
                                            as char,
                                    );
                                }
                                b.append_value(text);
                            }
                        }
                    }
                    cast(&b.finish(), dt)?
                }
                DataType::Boolean => Arc::new(
                    rows_idx
                        .iter()
                        .map(|&g| (!null(g)).then_some(h(g) & 1 == 1))
                        .collect::<BooleanArray>(),
                ),
                DataType::Float32 | DataType::Float64 => {
                    let (min, max) = match &gen_.kind {
                        FieldKind::Random { min, max, .. } => {
                            (min.unwrap_or(0.0), max.unwrap_or(1000.0))
                        }
                        FieldKind::Sequence { start, end } => (*start as f64, *end as f64),
                    };
                    let a: Float64Array = rows_idx
                        .iter()
                        .map(|&g| {
                            (!null(g)).then(|| match gen_.kind {
                                FieldKind::Sequence { start, .. } => (start + g as i64) as f64,
                                _ => min + (h(g) >> 11) as f64 / (1u64 << 53) as f64 * (max - min),
                            })
                        })
                        .collect();
                    cast(&a, dt)?
                }
                DataType::Decimal128(p, s) => {
                    let limit = 10i128.pow((*p).min(18) as u32);
                    let a: Decimal128Array = rows_idx
                        .iter()
                        .map(|&g| {
                            (!null(g)).then(|| match gen_.kind {
                                FieldKind::Sequence { start, .. } => {
                                    (start + g as i64) as i128 * 10i128.pow((*s).max(0) as u32)
                                }
                                _ => (h(g) as i128) % limit,
                            })
                        })
                        .collect();
                    Arc::new(a.with_precision_and_scale(*p, *s)?)
                }
                DataType::Timestamp(unit, _) => {
                    let per_ms = match unit {
                        TimeUnit::Second => 0.001,
                        TimeUnit::Millisecond => 1.0,
                        TimeUnit::Microsecond => 1_000.0,
                        TimeUnit::Nanosecond => 1_000_000.0,
                    };
                    let a: Int64Array = rows_idx
                        .iter()
                        .map(|&g| {
                            (!null(g)).then(|| {
                                let ms = BASE_TIME_MS as f64 + g as f64 * self.interval_ms;
                                (ms * per_ms) as i64
                            })
                        })
                        .collect();
                    cast(&a, dt)?
                }
                DataType::Date32 => {
                    let a: Int64Array = rows_idx
                        .iter()
                        .map(|&g| (!null(g)).then(|| 19_723 + (h(g) % 366) as i64))
                        .collect();
                    cast(&cast(&a, &DataType::Int32)?, dt)?
                }
                _ => {
                    let (lo, hi) = int_range(dt);
                    let a: Int64Array = rows_idx
                        .iter()
                        .map(|&g| {
                            (!null(g)).then(|| match gen_.kind {
                                FieldKind::Sequence { start, .. } => start + g as i64,
                                FieldKind::Random { min, max, .. } => {
                                    let lo = min.map(|v| v as i64).unwrap_or(lo);
                                    let hi = max.map(|v| v as i64).unwrap_or(hi);
                                    let span = (hi as i128 - lo as i128 + 1) as u128;
                                    (lo as i128 + (h(g) as u128 % span) as i128) as i64
                                }
                            })
                        })
                        .collect();
                    cast(&a, dt)?
                }
            };
            columns.push(array);
        }
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

fn int_range(dt: &DataType) -> (i64, i64) {
    match dt {
        DataType::Int8 => (i8::MIN as i64, i8::MAX as i64),
        DataType::Int16 => (i16::MIN as i64, i16::MAX as i64),
        DataType::Int32 => (i32::MIN as i64, i32::MAX as i64),
        DataType::UInt8 => (0, u8::MAX as i64),
        DataType::UInt16 => (0, u16::MAX as i64),
        DataType::UInt32 => (0, u32::MAX as i64),
        DataType::UInt64 => (0, i64::MAX),
        _ => (i64::MIN, i64::MAX),
    }
}

#[async_trait]
impl Source for DatagenSource {
    async fn poll_next(&mut self) -> Result<SourcePoll> {
        let live: Vec<usize> = (0..self.splits.len())
            .filter(|i| self.splits[*i].remaining(self.total_rows) > 0)
            .collect();
        if live.is_empty() {
            return Ok(SourcePoll::Finished);
        }
        let started = *self.started.get_or_insert_with(Instant::now);
        let allowed = (started.elapsed().as_secs_f64() * self.rate) as u64 + 1;
        if self.emitted >= allowed {
            let wait = (self.emitted + 1) as f64 / self.rate - started.elapsed().as_secs_f64();
            return Ok(SourcePoll::Idle(Duration::from_secs_f64(
                wait.clamp(0.001, 0.1),
            )));
        }
        let i = live[self.turn % live.len()];
        self.turn = self.turn.wrapping_add(1);
        let rows = BATCH_ROWS
            .min(self.splits[i].remaining(self.total_rows))
            .min((allowed - self.emitted).max(1));
        let batch = self.generate(&self.splits[i], rows)?;
        self.splits[i].next += rows;
        self.emitted += rows;
        Ok(SourcePoll::Batch(batch))
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        Split::snapshot(&self.splits)
    }
}
