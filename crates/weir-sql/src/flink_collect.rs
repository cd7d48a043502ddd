//! Flink's `COLLECT(x)`: the multiset of a group's non-NULL values, `MULTISET<T> NOT NULL`.
//!
//! A multiset is, as in Flink, a map from element to its count: an Arrow `Map<T, INT>`
//! whose entries field is named [`MULTISET_ENTRIES`], so that type names say `MULTISET<T>`
//! ([`is_multiset`]). The accumulator retracts (an updating input takes rows back) and its
//! state is two lists, elements and counts, so it is checkpointed like any other.

use arrow::array::{Array, ArrayRef, AsArray, Int32Array, Int64Array, MapArray, StructArray};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};
use std::collections::HashMap;
use std::sync::Arc;

/// Name of the entries field of a multiset's map type.
pub const MULTISET_ENTRIES: &str = "multiset";

/// `MULTISET<element>` as Weir's Arrow type.
pub fn multiset_type(element: &DataType) -> DataType {
    DataType::Map(
        Arc::new(Field::new(
            MULTISET_ENTRIES,
            DataType::Struct(Fields::from(vec![
                Field::new("key", element.clone(), false),
                Field::new("value", DataType::Int32, false),
            ])),
            false,
        )),
        false,
    )
}

/// The element type, when `t` is a multiset.
pub fn is_multiset(t: &DataType) -> Option<&DataType> {
    match t {
        DataType::Map(entries, _) if entries.name() == MULTISET_ENTRIES => {
            match entries.data_type() {
                DataType::Struct(kv) if kv.len() == 2 => Some(kv[0].data_type()),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The `collect` aggregate function.
pub fn udaf() -> AggregateUDF {
    AggregateUDF::new_from_impl(Collect {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Collect {
    signature: Signature,
}

impl AggregateUDFImpl for Collect {
    fn name(&self) -> &str {
        "collect"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(multiset_type(&args[0]))
    }

    fn is_nullable(&self) -> bool {
        false
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let element = args.input_fields[0].data_type().clone();
        let list = |name: &str, t: DataType| {
            Arc::new(Field::new(
                format!("{}[{name}]", args.name),
                DataType::List(Arc::new(Field::new_list_field(t, true))),
                true,
            ))
        };
        Ok(vec![
            list("elements", element),
            list("counts", DataType::Int64),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let Some(element) = is_multiset(args.return_field.data_type()) else {
            return exec_err!("COLLECT: unexpected result type {}", args.return_field);
        };
        Ok(Box::new(CollectAccumulator {
            element: element.clone(),
            counts: HashMap::new(),
        }))
    }
}

#[derive(Debug)]
struct CollectAccumulator {
    element: DataType,
    counts: HashMap<ScalarValue, i64>,
}

impl CollectAccumulator {
    fn add(&mut self, values: &ArrayRef, by: impl Fn(usize) -> i64) -> Result<()> {
        for i in 0..values.len() {
            if values.is_null(i) {
                continue;
            }
            let key = ScalarValue::try_from_array(values, i)?;
            let count = self.counts.entry(key.clone()).or_insert(0);
            *count += by(i);
            if *count <= 0 {
                self.counts.remove(&key);
            }
        }
        Ok(())
    }

    /// The elements in a fixed order (so equal multisets print alike), with their counts.
    fn sorted(&self) -> Vec<(&ScalarValue, i64)> {
        let mut entries: Vec<_> = self.counts.iter().map(|(k, c)| (k, *c)).collect();
        entries.sort_by(|a, b| a.0.partial_cmp(b.0).unwrap_or(std::cmp::Ordering::Equal));
        entries
    }

    fn elements(&self, entries: &[(&ScalarValue, i64)]) -> Result<ArrayRef> {
        if entries.is_empty() {
            return Ok(arrow::array::new_empty_array(&self.element));
        }
        ScalarValue::iter_to_array(entries.iter().map(|(k, _)| (*k).clone()))
    }
}

impl Accumulator for CollectAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(&values[0], |_| 1)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(&values[0], |_| -1)
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let entries = self.sorted();
        let keys = self.elements(&entries)?;
        let counts: Int32Array = entries
            .iter()
            .map(|(_, c)| Some(i32::try_from(*c).unwrap_or(i32::MAX)))
            .collect();
        let DataType::Map(field, _) = multiset_type(&self.element) else {
            unreachable!("a multiset is a map")
        };
        let DataType::Struct(kv) = field.data_type() else {
            unreachable!("map entries are a struct")
        };
        let struct_array =
            StructArray::try_new(kv.clone(), vec![keys, Arc::new(counts) as ArrayRef], None)?;
        let map = MapArray::try_new(
            field.clone(),
            OffsetBuffer::from_lengths([entries.len()]),
            struct_array,
            None,
            false,
        )?;
        Ok(ScalarValue::Map(Arc::new(map)))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
            + self
                .counts
                .keys()
                .map(|k| k.size() + std::mem::size_of::<i64>())
                .sum::<usize>()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let entries = self.sorted();
        let keys = self.elements(&entries)?;
        let counts: Int64Array = entries.iter().map(|(_, c)| Some(*c)).collect();
        let list = |values: ArrayRef| {
            ScalarValue::List(Arc::new(arrow::array::ListArray::new(
                Arc::new(Field::new_list_field(values.data_type().clone(), true)),
                OffsetBuffer::from_lengths([values.len()]),
                values,
                None,
            )))
        };
        Ok(vec![list(keys), list(Arc::new(counts))])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let (elements, counts) = (states[0].as_list::<i32>(), states[1].as_list::<i32>());
        for row in 0..elements.len() {
            if elements.is_null(row) || counts.is_null(row) {
                continue;
            }
            let (keys, n) = (elements.value(row), counts.value(row));
            let n = n.as_primitive::<arrow::datatypes::Int64Type>().clone();
            self.add(&keys, |i| n.value(i))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::StringArray;

    fn text(values: &[Option<&str>]) -> ArrayRef {
        Arc::new(StringArray::from(values.to_vec()))
    }

    fn accumulator() -> CollectAccumulator {
        CollectAccumulator {
            element: DataType::Utf8,
            counts: HashMap::new(),
        }
    }

    fn shown(acc: &mut CollectAccumulator) -> String {
        let ScalarValue::Map(map) = acc.evaluate().unwrap() else {
            panic!("not a map")
        };
        let entries = map.value(0);
        let (keys, counts) = (entries.column(0).as_string::<i32>(), entries.column(1));
        let counts = counts.as_primitive::<arrow::datatypes::Int32Type>();
        (0..entries.len())
            .map(|i| format!("{}={}", keys.value(i), counts.value(i)))
            .collect::<Vec<_>>()
            .join(",")
    }

    #[test]
    fn counts_skip_nulls_retract_and_survive_a_state_round_trip() {
        let mut acc = accumulator();
        acc.update_batch(&[text(&[Some("b"), Some("a"), None, Some("b")])])
            .unwrap();
        assert_eq!(shown(&mut acc), "a=1,b=2");
        acc.retract_batch(&[text(&[Some("a"), Some("b")])]).unwrap();
        assert_eq!(shown(&mut acc), "b=1");

        // A checkpoint's state merged into a fresh accumulator (restore) and into one
        // that has values of its own.
        let state: Vec<ArrayRef> = acc
            .state()
            .unwrap()
            .iter()
            .map(|s| s.to_array().unwrap())
            .collect();
        let mut restored = accumulator();
        restored.merge_batch(&state).unwrap();
        assert_eq!(shown(&mut restored), "b=1");
        let mut other = accumulator();
        other
            .update_batch(&[text(&[Some("c"), Some("b")])])
            .unwrap();
        other.merge_batch(&state).unwrap();
        assert_eq!(shown(&mut other), "b=2,c=1");

        let mut empty = accumulator();
        assert_eq!(shown(&mut empty), "");
        assert_eq!(
            crate::types::sql_name(&multiset_type(&DataType::Int32)),
            "MULTISET<INT>"
        );
    }
}
