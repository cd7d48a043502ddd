//! Metadata columns of a source (`col TYPE METADATA [FROM 'key'] [VIRTUAL]`): which of the
//! table's columns they are, what the format decodes without them, and putting their
//! values in place beside the decoded columns. Each connector names its own keys.

use arrow::array::ArrayRef;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use std::sync::Arc;
use weir_common::{ConnectorOptions, Error, Result};

/// The metadata columns' positions in `schema` with what each holds; an unknown key is
/// an error listing the connector's `keys`.
pub(crate) fn resolve<T>(
    options: &ConnectorOptions,
    connector: &str,
    schema: &SchemaRef,
    metadata: &[(String, String)],
    keys: &[&str],
    from_key: impl Fn(&str) -> Option<T>,
) -> Result<Vec<(usize, T)>> {
    metadata
        .iter()
        .map(|(column, key)| {
            let what = from_key(key).ok_or_else(|| {
                Error::config(format!(
                    "table '{}': column '{column}' reads unknown metadata '{key}'; the \
                     {connector} connector has: {}",
                    options.table,
                    keys.join(", ")
                ))
            })?;
            Ok((schema.index_of(column)?, what))
        })
        .collect()
}

/// The columns the data itself holds: the table's without the metadata columns.
pub(crate) fn physical_schema<T>(schema: &SchemaRef, metadata: &[(usize, T)]) -> SchemaRef {
    if metadata.is_empty() {
        return schema.clone();
    }
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(i, _)| !metadata.iter().any(|(m, _)| m == i))
        .map(|(_, f)| f.clone())
        .collect();
    Arc::new(Schema::new(fields))
}

/// A decoded batch (physical columns, and the row kinds of a changelog) with the metadata
/// columns put in their places: `values(what)` gives a metadata column's values, one per
/// row, cast here to the column's type.
pub(crate) fn place<T>(
    schema: &SchemaRef,
    metadata: &[(usize, T)],
    batch: &RecordBatch,
    mut values: impl FnMut(&T) -> Result<ArrayRef>,
) -> Result<RecordBatch> {
    if metadata.is_empty() {
        return Ok(batch.clone());
    }
    let (data, ops) = weir_common::changelog::split(batch);
    let mut physical = data.columns().iter();
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (i, field) in schema.fields().iter().enumerate() {
        match metadata.iter().find(|(m, _)| *m == i) {
            Some((_, what)) => {
                columns.push(arrow::compute::cast(&values(what)?, field.data_type())?)
            }
            None => columns.push(physical.next().expect("one per physical column").clone()),
        }
    }
    let out = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(match ops {
        Some(ops) => weir_common::changelog::attach(&out, Arc::new(ops))?,
        None => out,
    })
}
