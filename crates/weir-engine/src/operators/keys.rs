//! Keys of keyed operators: converting key columns into arrow `Row`s, with one constant
//! key when there are no key columns (a global aggregate, an unpartitioned Top-N), and
//! schemas relaxed to nullable for emitted batches.

use arrow::array::{ArrayRef, BooleanArray, RecordBatch};
use arrow::datatypes::{DataType, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use std::sync::Arc;
use weir_common::Result;

/// A converter for the key columns `keys` of `schema`.
pub fn converter(schema: &Schema, keys: &[usize]) -> Result<RowConverter> {
    let mut fields: Vec<SortField> = keys
        .iter()
        .map(|k| SortField::new(schema.field(*k).data_type().clone()))
        .collect();
    if fields.is_empty() {
        // No key columns: every row has the same key.
        fields.push(SortField::new(DataType::Boolean));
    }
    Ok(RowConverter::new(fields)?)
}

/// How many columns [`converter`] converts for `keys` (one for no keys).
pub fn width(keys: &[usize]) -> usize {
    keys.len().max(1)
}

/// The key columns of `batch`, as [`converter`] expects them.
pub fn columns(batch: &RecordBatch, keys: &[usize]) -> Vec<ArrayRef> {
    if keys.is_empty() {
        return vec![Arc::new(BooleanArray::from(vec![true; batch.num_rows()]))];
    }
    keys.iter().map(|k| batch.column(*k).clone()).collect()
}

/// The key hashes ([`weir_state::key`]) of the `keys` columns of `batch`, by row.
pub fn hashes(batch: &RecordBatch, keys: &[usize]) -> weir_common::Result<Vec<u64>> {
    let columns: Vec<&dyn arrow::array::Array> =
        keys.iter().map(|c| batch.column(*c).as_ref()).collect();
    weir_state::key::hash_arrays(&columns, batch.num_rows())
}

/// `schema` with every field nullable (aggregates and outer joins produce NULLs in
/// columns the plan may call non-nullable).
pub fn nullable(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}

/// The rows of `left` padded with NULLs for every column of `right`, as `schema` (an
/// outer join's rows without a match).
pub fn null_padded(left: &RecordBatch, right: &Schema, schema: &SchemaRef) -> Result<RecordBatch> {
    let n = left.num_rows();
    let mut columns = left.columns().to_vec();
    columns.extend(
        right
            .fields()
            .iter()
            .map(|f| arrow::array::new_null_array(f.data_type(), n)),
    );
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// The names of columns `cols` of `schema`, comma-separated (for operator names).
pub fn names(schema: &Schema, cols: &[usize]) -> String {
    cols.iter()
        .map(|c| schema.field(*c).name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
