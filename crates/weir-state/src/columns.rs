//! Per-group columns: one value per group, indexed by the dense group ids a hash table
//! hands out (0, 1, 2, …), read ([`GroupColumn::gather`]) and written
//! ([`GroupColumn::scatter`]) a batch of groups at a time as Arrow arrays.
//!
//! Arrow arrays are immutable; an operator whose groups change a few at a time (an
//! updating aggregate) needs columns it can overwrite in place. Primitive types (integers,
//! floats, decimals, dates, times, timestamps, intervals) are a plain vector of values and
//! a validity bitmap. Every other type keeps the arrays it was given and, per group, where
//! its current value is; superseded values are dropped by compacting once they outweigh
//! the live ones.

use arrow::array::BooleanBufferBuilder;
use arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, PrimitiveArray, downcast_primitive,
    new_null_array,
};
use arrow::buffer::{BooleanBuffer, NullBuffer};
use arrow::datatypes::DataType;
use arrow::error::ArrowError;
use std::sync::Arc;

/// One value per group, overwritten a batch at a time.
pub trait GroupColumn: Send {
    /// The values' type.
    fn data_type(&self) -> &DataType;
    /// How many groups the column holds.
    fn len(&self) -> usize;
    /// Whether the column holds no group.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Grows the column to `len` groups; the new ones hold NULL.
    fn grow(&mut self, len: usize);
    /// The values of `groups`, in that order.
    fn gather(&self, groups: &[u32]) -> Result<ArrayRef, ArrowError>;
    /// Sets group `groups[i]` to `values[i]` (cast to the column's type if need be).
    fn scatter(&mut self, groups: &[u32], values: &ArrayRef) -> Result<(), ArrowError>;
    /// Heap bytes held.
    fn size(&self) -> usize;
}

/// An empty column for values of `data_type`.
pub fn new_column(data_type: &DataType) -> Box<dyn GroupColumn> {
    macro_rules! primitive {
        ($t:ty) => {
            Box::new(PrimitiveColumn::<$t>::new(data_type.clone()))
        };
    }
    downcast_primitive! {
        data_type => (primitive),
        _ => Box::new(ChunkedColumn::new(data_type.clone())),
    }
}

/// A new column holding `values` for groups `0..values.len()`.
pub fn column_of(values: &ArrayRef) -> Result<Box<dyn GroupColumn>, ArrowError> {
    let mut column = new_column(values.data_type());
    column.grow(values.len());
    let all: Vec<u32> = (0..values.len() as u32).collect();
    column.scatter(&all, values)?;
    Ok(column)
}

fn cast_to(values: &ArrayRef, data_type: &DataType) -> Result<ArrayRef, ArrowError> {
    if values.data_type() == data_type {
        Ok(values.clone())
    } else {
        arrow::compute::cast(values, data_type)
    }
}

struct PrimitiveColumn<T: ArrowPrimitiveType> {
    data_type: DataType,
    values: Vec<T::Native>,
    valid: BooleanBufferBuilder,
}

impl<T: ArrowPrimitiveType> PrimitiveColumn<T> {
    fn new(data_type: DataType) -> Self {
        Self {
            data_type,
            values: Vec::new(),
            valid: BooleanBufferBuilder::new(0),
        }
    }
}

impl<T: ArrowPrimitiveType> GroupColumn for PrimitiveColumn<T> {
    fn data_type(&self) -> &DataType {
        &self.data_type
    }

    fn len(&self) -> usize {
        self.values.len()
    }

    fn grow(&mut self, len: usize) {
        if len > self.values.len() {
            self.valid.append_n(len - self.values.len(), false);
            self.values.resize(len, T::Native::default());
        }
    }

    fn gather(&self, groups: &[u32]) -> Result<ArrayRef, ArrowError> {
        let values: Vec<T::Native> = groups.iter().map(|g| self.values[*g as usize]).collect();
        let valid =
            BooleanBuffer::collect_bool(groups.len(), |i| self.valid.get_bit(groups[i] as usize));
        let nulls = Some(NullBuffer::new(valid)).filter(|n| n.null_count() > 0);
        Ok(Arc::new(
            PrimitiveArray::<T>::new(values.into(), nulls).with_data_type(self.data_type.clone()),
        ))
    }

    fn scatter(&mut self, groups: &[u32], values: &ArrayRef) -> Result<(), ArrowError> {
        let values = cast_to(values, &self.data_type)?;
        let values = values.as_primitive::<T>();
        for (i, g) in groups.iter().enumerate() {
            let g = *g as usize;
            self.values[g] = values.value(i);
            self.valid.set_bit(g, values.is_valid(i));
        }
        Ok(())
    }

    fn size(&self) -> usize {
        self.values.capacity() * std::mem::size_of::<T::Native>() + self.valid.capacity() / 8
    }
}

/// Values of any type: the arrays scattered so far, and per group the (array, row) of its
/// current value. Array 0 is a single NULL, where groups start.
struct ChunkedColumn {
    data_type: DataType,
    chunks: Vec<ArrayRef>,
    at: Vec<(usize, usize)>,
    /// Rows held by `chunks`, live or superseded.
    stored: usize,
}

impl ChunkedColumn {
    fn new(data_type: DataType) -> Self {
        Self {
            chunks: vec![new_null_array(&data_type, 1)],
            data_type,
            at: Vec::new(),
            stored: 1,
        }
    }

    /// Rewrites the live values into one array once superseded ones outweigh them (or
    /// the arrays are many), so memory stays proportional to the groups.
    fn compact_if_due(&mut self) -> Result<(), ArrowError> {
        let live = self.at.len();
        if self.stored <= 2 * live + 4096 && self.chunks.len() <= 256 + live / 256 {
            return Ok(());
        }
        let all: Vec<u32> = (0..live as u32).collect();
        let values = self.gather(&all)?;
        self.chunks = vec![new_null_array(&self.data_type, 1), values];
        for (g, at) in self.at.iter_mut().enumerate() {
            *at = (1, g);
        }
        self.stored = 1 + live;
        Ok(())
    }
}

impl GroupColumn for ChunkedColumn {
    fn data_type(&self) -> &DataType {
        &self.data_type
    }

    fn len(&self) -> usize {
        self.at.len()
    }

    fn grow(&mut self, len: usize) {
        if len > self.at.len() {
            self.at.resize(len, (0, 0));
        }
    }

    fn gather(&self, groups: &[u32]) -> Result<ArrayRef, ArrowError> {
        let chunks: Vec<&dyn Array> = self.chunks.iter().map(|c| c.as_ref()).collect();
        let indices: Vec<(usize, usize)> = groups.iter().map(|g| self.at[*g as usize]).collect();
        arrow::compute::interleave(&chunks, &indices)
    }

    fn scatter(&mut self, groups: &[u32], values: &ArrayRef) -> Result<(), ArrowError> {
        if groups.is_empty() {
            return Ok(());
        }
        let chunk = self.chunks.len();
        self.chunks.push(cast_to(values, &self.data_type)?);
        self.stored += values.len();
        for (i, g) in groups.iter().enumerate() {
            self.at[*g as usize] = (chunk, i);
        }
        self.compact_if_due()
    }

    fn size(&self) -> usize {
        self.at.capacity() * std::mem::size_of::<(usize, usize)>()
            + self
                .chunks
                .iter()
                .map(|c| c.get_array_memory_size())
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};

    fn roundtrip(mut column: Box<dyn GroupColumn>, a: ArrayRef, b: ArrayRef) {
        column.grow(4);
        column.scatter(&[0, 2, 3], &a).unwrap();
        column.scatter(&[3, 1], &b).unwrap();
        column.grow(5);
        let got = column.gather(&[0, 1, 2, 3, 4, 2]).unwrap();
        let expected: Vec<ArrayRef> = vec![
            a.slice(0, 1),
            b.slice(1, 1),
            a.slice(1, 1),
            b.slice(0, 1),
            new_null_array(a.data_type(), 1),
            a.slice(1, 1),
        ];
        let refs: Vec<&dyn Array> = expected.iter().map(|e| e.as_ref()).collect();
        assert_eq!(&got, &arrow::compute::concat(&refs).unwrap());
    }

    #[test]
    fn primitive_columns_overwrite_values_and_nulls() {
        let column = new_column(&DataType::Int64);
        let a: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), None, Some(3)]));
        let b: ArrayRef = Arc::new(Int64Array::from(vec![Some(30), Some(10)]));
        roundtrip(column, a, b);
    }

    #[test]
    fn other_columns_overwrite_values_and_compact() {
        let column = new_column(&DataType::Utf8);
        let a: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), None, Some("c")]));
        let b: ArrayRef = Arc::new(StringArray::from(vec![Some("cc"), Some("bb")]));
        roundtrip(column, a, b);

        let mut column = new_column(&DataType::Utf8);
        column.grow(3);
        for i in 0..10_000u32 {
            let v: ArrayRef = Arc::new(StringArray::from(vec![format!("v{i}")]));
            column.scatter(&[i % 3], &v).unwrap();
        }
        let got = column.gather(&[0, 1, 2]).unwrap();
        assert_eq!(
            got.as_string::<i32>().iter().collect::<Vec<_>>(),
            vec![Some("v9999"), Some("v9997"), Some("v9998")]
        );
        assert!(
            column.size() < 64 * 1024,
            "superseded values were not dropped"
        );
    }

    #[test]
    fn scattered_values_are_cast_to_the_columns_type() {
        let mut column = new_column(&DataType::Int64);
        column.grow(2);
        let v: ArrayRef = Arc::new(arrow::array::Int32Array::from(vec![7, 8]));
        column.scatter(&[1, 0], &v).unwrap();
        let got = column.gather(&[0, 1]).unwrap();
        assert_eq!(
            got.as_primitive::<arrow::datatypes::Int64Type>().values(),
            &[8, 7]
        );
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Batches of (group, value) writes to up to 40 groups.
        fn writes() -> impl Strategy<Value = Vec<Vec<(u32, Option<i64>)>>> {
            proptest::collection::vec(
                proptest::collection::vec(
                    (0u32..40, proptest::option::weighted(0.8, -1000i64..1000)),
                    0..30,
                ),
                0..60,
            )
        }

        /// Applies `writes` to a column of `data_type` (values cast from `Int64`) and to
        /// a plain vector; both must read back the same.
        fn check(
            data_type: &DataType,
            writes: &[Vec<(u32, Option<i64>)>],
        ) -> Result<(), TestCaseError> {
            let mut column = new_column(data_type);
            let mut model: Vec<Option<i64>> = Vec::new();
            for batch in writes {
                // One write per group per batch, as an operator scatters its touched groups.
                let mut seen = std::collections::HashSet::new();
                let batch: Vec<_> = batch.iter().filter(|(g, _)| seen.insert(*g)).collect();
                let len = batch
                    .iter()
                    .map(|(g, _)| *g as usize + 1)
                    .max()
                    .unwrap_or(0);
                if len > model.len() {
                    model.resize(len, None);
                    column.grow(len);
                }
                let groups: Vec<u32> = batch.iter().map(|(g, _)| *g).collect();
                let values: ArrayRef = Arc::new(Int64Array::from(
                    batch.iter().map(|(_, v)| *v).collect::<Vec<_>>(),
                ));
                column.scatter(&groups, &values).unwrap();
                for (g, v) in batch {
                    model[*g as usize] = *v;
                }
            }
            let all: Vec<u32> = (0..model.len() as u32).collect();
            let got =
                arrow::compute::cast(&column.gather(&all).unwrap(), &DataType::Int64).unwrap();
            let expected = Int64Array::from(model);
            prop_assert_eq!(got.as_primitive::<arrow::datatypes::Int64Type>(), &expected);
            Ok(())
        }

        proptest! {
            #[test]
            fn columns_read_back_what_was_last_written(writes in writes()) {
                check(&DataType::Int64, &writes)?;
                check(&DataType::Decimal128(20, 0), &writes)?;
                check(&DataType::Utf8, &writes)?;
            }
        }
    }
}
