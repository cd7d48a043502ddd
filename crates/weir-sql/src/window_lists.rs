//! The windows a row belongs to under Flink's HOP and CUMULATE window TVFs, as a list per
//! row that `UNNEST` expands: `weir_hop_starts(ts, slide_ms, size_ms)` is the starts of
//! the `size / slide` hopping windows holding `ts`, latest first;
//! `weir_cumulate_ends(ts, step_ms, size_ms)` the ends of the cumulating windows of
//! `ts`'s `size`-long period that hold it, earliest first. A row is read once and
//! expanded in one step (rather than once per window copy), in streaming and batch mode.

use crate::group_windows::{epoch_millis, from_epoch_millis};
use arrow::array::{Array, ArrayRef, ListArray};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use std::sync::Arc;

/// Name of the hopping windows' function.
pub const HOP_STARTS: &str = "weir_hop_starts";
/// Name of the cumulating windows' function.
pub const CUMULATE_ENDS: &str = "weir_cumulate_ends";

/// `weir_hop_starts` or `weir_cumulate_ends`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct WindowList {
    name: &'static str,
    signature: Signature,
}

impl WindowList {
    /// Both functions.
    pub fn udfs() -> [ScalarUDF; 2] {
        [HOP_STARTS, CUMULATE_ENDS].map(|name| {
            ScalarUDF::new_from_impl(WindowList {
                name,
                signature: Signature::any(3, Volatility::Immutable),
            })
        })
    }
}

/// The `(start, end)` windows holding time `t` (milliseconds): hopping windows of `size`
/// every `step` (latest first), or cumulating windows growing by `step` up to `size`.
fn windows(hop: bool, t: i64, step: i64, size: i64) -> impl Iterator<Item = i64> {
    let count = size / step;
    let (last_start, period) = (t - t.rem_euclid(step), t - t.rem_euclid(size));
    (0..count).filter_map(move |i| {
        if hop {
            Some(last_start - i * step)
        } else {
            let end = period + (i + 1) * step;
            (t < end).then_some(end)
        }
    })
}

/// A literal integer argument (the planner may hand it over as a one-value column).
fn literal_millis(v: &ColumnarValue) -> Option<i64> {
    match crate::unnest::constant(v)?.cast_to(&DataType::Int64).ok()? {
        ScalarValue::Int64(Some(ms)) => Some(ms),
        _ => None,
    }
}

impl ScalarUDFImpl for WindowList {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args.first() {
            Some(t @ DataType::Timestamp(..)) => Ok(DataType::List(Arc::new(Field::new(
                "item",
                t.clone(),
                true,
            )))),
            other => plan_err!(
                "{}: the time attribute must be a timestamp, not {other:?}",
                if self.name == HOP_STARTS {
                    "HOP"
                } else {
                    "CUMULATE"
                }
            ),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (Some(step), Some(size)) =
            (literal_millis(&args.args[1]), literal_millis(&args.args[2]))
        else {
            return exec_err!(
                "{}: step and size must be literal milliseconds, not {:?}",
                self.name,
                &args.args[1..]
            );
        };
        if step <= 0 || size <= 0 || size % step != 0 {
            return exec_err!(
                "{}: the size must be a positive multiple of the step",
                self.name
            );
        }
        let DataType::List(item) = args.return_field.data_type() else {
            return exec_err!("{}: unexpected return type", self.name);
        };
        let time = args.args[0].clone().into_array(args.number_rows)?;
        let ms = epoch_millis(&time)?;
        let hop = self.name == HOP_STARTS;
        let mut values = Vec::with_capacity(ms.len() * (size / step) as usize);
        let mut lengths = Vec::with_capacity(ms.len());
        for (i, t) in ms.values().iter().enumerate() {
            // A row without a time is in no window.
            let before = values.len();
            if ms.is_valid(i) {
                values.extend(windows(hop, *t, step, size));
            }
            lengths.push(values.len() - before);
        }
        let values: ArrayRef = from_epoch_millis(values, item.data_type())?;
        Ok(ColumnarValue::Array(Arc::new(ListArray::try_new(
            item.clone(),
            OffsetBuffer::from_lengths(lengths),
            values,
            None,
        )?)))
    }
}

#[cfg(test)]
mod tests {
    use super::windows;

    #[test]
    fn hopping_windows_hold_the_time_latest_first() {
        let starts: Vec<i64> = windows(true, 12_345, 2_000, 10_000).collect();
        assert_eq!(starts, vec![12_000, 10_000, 8_000, 6_000, 4_000]);
        for s in starts {
            assert!(s <= 12_345 && 12_345 < s + 10_000);
        }
        // Before the epoch, windows still align to multiples of the slide.
        let starts: Vec<i64> = windows(true, -1, 2_000, 4_000).collect();
        assert_eq!(starts, vec![-2_000, -4_000]);
    }

    #[test]
    fn cumulating_windows_end_after_the_time_within_its_period() {
        let ends: Vec<i64> = windows(false, 12_345, 2_000, 10_000).collect();
        assert_eq!(ends, vec![14_000, 16_000, 18_000, 20_000]);
        let ends: Vec<i64> = windows(false, 10_000, 2_000, 10_000).collect();
        assert_eq!(ends, vec![12_000, 14_000, 16_000, 18_000, 20_000]);
        let ends: Vec<i64> = windows(false, 19_999, 2_000, 10_000).collect();
        assert_eq!(ends, vec![20_000]);
    }
}
