//! `MIN` and `MAX` over a changelog, as Flink's `MinWithRetractAggFunction` and
//! `MaxWithRetractAggFunction`: the accumulator counts each value it holds, so a retracted
//! row (`-U`/`-D`) takes its value back whenever it came. DataFusion's sliding `MIN`/`MAX`
//! cannot stand in: they are made for window frames, and take values back in the order
//! they came (a retracted count of a `GROUP BY` is rarely the oldest value).

use arrow::array::{Array, ArrayRef, AsArray, new_empty_array};
use arrow::datatypes::{DataType, Int64Type};
use datafusion::common::ScalarValue;
use datafusion::common::utils::SingleRowListArrayBuilder;
use datafusion::logical_expr::Accumulator;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

/// A value ordered as `MIN`/`MAX` order it (values of one type; NaN equal to itself).
#[derive(Debug, Clone, PartialEq)]
struct Ordered(ScalarValue);

impl Eq for Ordered {}

impl PartialOrd for Ordered {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ordered {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.partial_cmp(&other.0).unwrap_or(Ordering::Equal)
    }
}

/// Whether `function` (a DataFusion aggregate's name) is `MIN` or `MAX`: `Some(true)` for
/// `MAX`.
pub fn is_min_max(function: &str) -> Option<bool> {
    match function {
        "max" => Some(true),
        "min" => Some(false),
        _ => None,
    }
}

/// `MIN` (or `MAX`) of the values added and not taken back.
#[derive(Debug)]
pub struct RetractingMinMax {
    max: bool,
    data_type: DataType,
    /// Each value held, and how many times.
    values: BTreeMap<Ordered, i64>,
}

impl RetractingMinMax {
    pub fn new(max: bool, data_type: DataType) -> Self {
        Self {
            max,
            data_type,
            values: BTreeMap::new(),
        }
    }

    /// Adds `n` of `value` (takes them back when negative). A value taken back that is
    /// not held (the state TTL may have dropped it) is ignored, as in Flink.
    fn add(&mut self, value: ScalarValue, n: i64) {
        if value.is_null() {
            return;
        }
        match self.values.entry(Ordered(value)) {
            Entry::Occupied(mut held) => {
                *held.get_mut() += n;
                if *held.get() <= 0 {
                    held.remove();
                }
            }
            Entry::Vacant(new) => {
                if n > 0 {
                    new.insert(n);
                }
            }
        }
    }
}

impl Accumulator for RetractingMinMax {
    fn update_batch(&mut self, values: &[ArrayRef]) -> datafusion::common::Result<()> {
        for i in 0..values[0].len() {
            self.add(ScalarValue::try_from_array(&values[0], i)?, 1);
        }
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> datafusion::common::Result<()> {
        for i in 0..values[0].len() {
            self.add(ScalarValue::try_from_array(&values[0], i)?, -1);
        }
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> datafusion::common::Result<ScalarValue> {
        let best = match self.max {
            true => self.values.keys().next_back(),
            false => self.values.keys().next(),
        };
        match best {
            Some(v) => Ok(v.0.clone()),
            None => ScalarValue::try_from(&self.data_type),
        }
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
            + self
                .values
                .keys()
                .map(|k| k.0.size() + std::mem::size_of::<i64>() + 16)
                .sum::<usize>()
    }

    /// The values held and their counts, as two lists.
    fn state(&mut self) -> datafusion::common::Result<Vec<ScalarValue>> {
        let values = match self.values.is_empty() {
            true => new_empty_array(&self.data_type),
            false => ScalarValue::iter_to_array(self.values.keys().map(|k| k.0.clone()))?,
        };
        let counts: ArrayRef = std::sync::Arc::new(arrow::array::Int64Array::from_iter_values(
            self.values.values().copied(),
        ));
        Ok(vec![
            SingleRowListArrayBuilder::new(values).build_list_scalar(),
            SingleRowListArrayBuilder::new(counts).build_list_scalar(),
        ])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> datafusion::common::Result<()> {
        let (values, counts) = (states[0].as_list::<i32>(), states[1].as_list::<i32>());
        for row in 0..values.len() {
            if values.is_null(row) {
                continue;
            }
            let (vs, cs) = (values.value(row), counts.value(row));
            let cs = cs.as_primitive::<Int64Type>();
            for i in 0..vs.len() {
                self.add(ScalarValue::try_from_array(&vs, i)?, cs.value(i));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use std::sync::Arc;

    fn column(values: &[i64]) -> ArrayRef {
        Arc::new(Int64Array::from(values.to_vec()))
    }

    /// Values taken back out of order leave the others; the state restores what it held.
    #[test]
    fn any_value_can_be_taken_back_and_the_state_restores() {
        let mut max = RetractingMinMax::new(true, DataType::Int64);
        let mut min = RetractingMinMax::new(false, DataType::Int64);
        for acc in [&mut max, &mut min] {
            acc.update_batch(&[column(&[300, 1200, 5, 1200, 7])])
                .unwrap();
            acc.retract_batch(&[column(&[1200, 5, 999])]).unwrap();
        }
        assert_eq!(max.evaluate().unwrap(), ScalarValue::Int64(Some(1200)));
        assert_eq!(min.evaluate().unwrap(), ScalarValue::Int64(Some(7)));
        let state: Vec<ArrayRef> = (max.state().unwrap().iter())
            .map(|s| s.to_array().unwrap())
            .collect();
        let mut restored = RetractingMinMax::new(true, DataType::Int64);
        restored.merge_batch(&state).unwrap();
        restored.retract_batch(&[column(&[1200])]).unwrap();
        assert_eq!(restored.evaluate().unwrap(), ScalarValue::Int64(Some(300)));
        restored.retract_batch(&[column(&[300, 7])]).unwrap();
        assert_eq!(restored.evaluate().unwrap(), ScalarValue::Int64(None));
        assert!(restored.values.is_empty());
    }
}
