//! Flink's legacy group windows: `GROUP BY k, TUMBLE(ts, size)` and `GROUP BY k,
//! SESSION(ts, gap)` with `TUMBLE_START`/`_END`/`_ROWTIME` and `SESSION_START`/`_END`/
//! `_ROWTIME` in the select list.
//!
//! The AST rewrite turns `TUMBLE(ts, size)` into `weir_tumble(ts, size)` and
//! `SESSION(ts, gap)` into `weir_session(ts, gap)`: scalar functions returning, per row, the
//! struct `{start, end}` of the row's own window (its tumbling window, resp. the session
//! `[ts, ts + gap)` of that row alone); `*_START(…)` becomes `…['start']`. DataFusion then
//! plans an ordinary aggregate grouped by that struct. The streaming planner recognises the
//! functions: a tumble key makes a window aggregate (its `end` is the window end), a session
//! key a session aggregate that merges overlapping sessions of a key. In batch mode tumbling
//! windows are exact; session aggregates are rewritten to merge the per-row sessions
//! ([`crate::batch_sessions`]).

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, StructArray};
use arrow::datatypes::{DataType, Field, Fields, Int64Type, TimeUnit};
use arrow::error::ArrowError;
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use std::sync::Arc;

/// Name of the tumbling-window key function.
pub const TUMBLE: &str = "weir_tumble";
/// Name of the session-window key function.
pub const SESSION: &str = "weir_session";

/// `weir_tumble` or `weir_session`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct WindowKey {
    name: &'static str,
    signature: Signature,
}

impl WindowKey {
    /// The function called `name` ([`TUMBLE`] or [`SESSION`]).
    pub fn udf(name: &'static str) -> ScalarUDF {
        ScalarUDF::new_from_impl(WindowKey {
            name,
            signature: Signature::any(2, Volatility::Immutable),
        })
    }
}

/// The `{start, end}` struct type of a window key over a time column of type `time`.
pub fn key_type(time: &DataType) -> DataType {
    let tz = match time {
        DataType::Timestamp(_, tz) => tz.clone(),
        _ => None,
    };
    let t = DataType::Timestamp(TimeUnit::Millisecond, tz);
    DataType::Struct(Fields::from(vec![
        Field::new("start", t.clone(), true),
        Field::new("end", t, true),
    ]))
}

/// Milliseconds of a literal day-time interval (`INTERVAL '10' SECOND`).
pub fn interval_millis(value: &ScalarValue) -> Option<i64> {
    match value {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => {
            Some(v.days as i64 * 86_400_000 + v.nanoseconds / 1_000_000)
        }
        ScalarValue::IntervalDayTime(Some(v)) => {
            Some(v.days as i64 * 86_400_000 + v.milliseconds as i64)
        }
        _ => None,
    }
}

/// A timestamp column (any unit or time zone) as milliseconds since the epoch.
pub fn epoch_millis(a: &ArrayRef) -> std::result::Result<Int64Array, ArrowError> {
    let ms = arrow::compute::cast(a, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
    Ok(arrow::compute::cast(&ms, &DataType::Int64)?
        .as_primitive::<Int64Type>()
        .clone())
}

/// Milliseconds since the epoch as a column of timestamp type `data_type`.
pub fn from_epoch_millis(
    values: Vec<i64>,
    data_type: &DataType,
) -> std::result::Result<ArrayRef, ArrowError> {
    let a: ArrayRef = Arc::new(Int64Array::from(values));
    let a = arrow::compute::cast(&a, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
    arrow::compute::cast(&a, data_type)
}

/// The `start`/`end` children of a window-key struct column as milliseconds.
pub fn bounds(key: &ArrayRef) -> std::result::Result<(Vec<i64>, Vec<i64>), ArrowError> {
    let key = key.as_struct();
    let millis = |a: &ArrayRef| Ok::<_, ArrowError>(epoch_millis(a)?.values().to_vec());
    Ok((millis(key.column(0))?, millis(key.column(1))?))
}

/// A window-key struct column from bounds in milliseconds.
pub fn key_array(data_type: &DataType, starts: Vec<i64>, ends: Vec<i64>) -> Result<ArrayRef> {
    let DataType::Struct(fields) = data_type else {
        return exec_err!("window key type is not a struct");
    };
    let t = fields[0].data_type();
    Ok(Arc::new(StructArray::try_new(
        fields.clone(),
        vec![from_epoch_millis(starts, t)?, from_epoch_millis(ends, t)?],
        None,
    )?))
}

impl ScalarUDFImpl for WindowKey {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args.first() {
            Some(t @ DataType::Timestamp(..)) => Ok(key_type(t)),
            other => plan_err!(
                "{}: the time attribute must be a timestamp, not {other:?}",
                if self.name == TUMBLE {
                    "TUMBLE"
                } else {
                    "SESSION"
                }
            ),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let size = match &args.args[1] {
            ColumnarValue::Scalar(v) => interval_millis(v),
            _ => None,
        };
        let Some(size) = size.filter(|s| *s > 0) else {
            return exec_err!(
                "{}: the size must be a positive literal day-time interval",
                self.name
            );
        };
        let time = args.args[0].clone().into_array(args.number_rows)?;
        let ms = epoch_millis(&time)?;
        let starts: Vec<i64> = ms
            .values()
            .iter()
            .map(|t| {
                if self.name == TUMBLE {
                    t - t.rem_euclid(size)
                } else {
                    *t
                }
            })
            .collect();
        let ends = starts.iter().map(|s| s + size).collect();
        let key = key_array(args.return_field.data_type(), starts, ends)?;
        // A row without a time has no window.
        let key = match ms.nulls() {
            Some(nulls) => {
                let s = key.as_struct().clone();
                let (fields, columns, _) = s.into_parts();
                Arc::new(StructArray::try_new(fields, columns, Some(nulls.clone()))?) as ArrayRef
            }
            None => key,
        };
        Ok(ColumnarValue::Array(key))
    }
}

/// Name of the processing-time function.
pub const PROCTIME: &str = "proctime";

/// `PROCTIME()`: the wall-clock time a row is processed, as `TIMESTAMP_LTZ(3)` (one value
/// per batch). A window TVF over it is a processing-time window: the streaming planner
/// follows the time column back to this function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ProcTime {
    signature: Signature,
}

impl ProcTime {
    /// The function.
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(ProcTime {
            signature: Signature::nullary(Volatility::Volatile),
        })
    }
}

impl ScalarUDFImpl for ProcTime {
    fn name(&self) -> &str {
        PROCTIME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Timestamp(
            TimeUnit::Millisecond,
            Some("UTC".into()),
        ))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let now = weir_common::now_ms() as i64;
        let values = arrow::array::TimestampMillisecondArray::from(vec![now; args.number_rows])
            .with_timezone("UTC");
        Ok(ColumnarValue::Array(Arc::new(values)))
    }
}
