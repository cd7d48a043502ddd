//! Changelog streams. An updating operator (a `GROUP BY` without windows, a Top-N) emits
//! batches whose last column, [`OP_COLUMN`], holds each row's [`RowKind`] as an `Int8`;
//! append-only streams have no such column. Operators that pass rows through (filters,
//! projections, unions) carry the column along; sinks decide what to do with it.

use arrow::array::{Array, ArrayRef, AsArray, Int8Array, RecordBatch, RecordBatchOptions};
use arrow::datatypes::{DataType, Field, Int8Type, Schema, SchemaRef};
use std::sync::Arc;

/// Name of the row-kind column of a changelog batch (always its last column).
pub const OP_COLUMN: &str = "__weir_op";

/// The kind of change a row stands for (Flink's `RowKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i8)]
pub enum RowKind {
    /// `+I`: a new row.
    Insert = 0,
    /// `-U`: the previous version of an updated row, retracted.
    UpdateBefore = 1,
    /// `+U`: the new version of an updated row.
    UpdateAfter = 2,
    /// `-D`: a row retracted for good.
    Delete = 3,
}

impl RowKind {
    /// From the `Int8` stored in [`OP_COLUMN`].
    pub fn from_i8(v: i8) -> RowKind {
        match v {
            1 => RowKind::UpdateBefore,
            2 => RowKind::UpdateAfter,
            3 => RowKind::Delete,
            _ => RowKind::Insert,
        }
    }

    /// Flink's short form: `+I`, `-U`, `+U`, `-D`.
    pub fn short(self) -> &'static str {
        match self {
            RowKind::Insert => "+I",
            RowKind::UpdateBefore => "-U",
            RowKind::UpdateAfter => "+U",
            RowKind::Delete => "-D",
        }
    }

    /// Whether the row takes a previous row back (`-U`, `-D`).
    pub fn is_retraction(self) -> bool {
        matches!(self, RowKind::UpdateBefore | RowKind::Delete)
    }
}

/// Formats whose records are changes (`+I`/`-U`/`+U`/`-D`), so a table read in one is a
/// changelog source.
pub const CHANGELOG_FORMATS: &[&str] = &["debezium-json", "canal-json", "maxwell-json"];

/// Whether a table with these options is read as a changelog: an `upsert-kafka` table, or
/// one whose `format` (or the `value.format` of a Kafka table) is a changelog format.
pub fn is_changelog_source(options: &crate::ConnectorOptions) -> bool {
    if options.get("connector") == Some("upsert-kafka") {
        return true;
    }
    ["format", "value.format"].iter().any(|key| {
        options
            .get(key)
            .is_some_and(|f| CHANGELOG_FORMATS.contains(&f.to_ascii_lowercase().as_str()))
    })
}

/// The field of [`OP_COLUMN`].
pub fn op_field() -> Field {
    Field::new(OP_COLUMN, DataType::Int8, false)
}

/// `schema` with [`OP_COLUMN`] appended.
pub fn with_op_field(schema: &Schema) -> SchemaRef {
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(op_field());
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Whether `batch` carries row kinds.
pub fn is_changelog(batch: &RecordBatch) -> bool {
    batch
        .schema()
        .fields()
        .last()
        .is_some_and(|f| f.name() == OP_COLUMN)
}

/// Splits a batch into its data columns and its row kinds (`None` when append-only).
pub fn split(batch: &RecordBatch) -> (RecordBatch, Option<Int8Array>) {
    if !is_changelog(batch) {
        return (batch.clone(), None);
    }
    let n = batch.num_columns() - 1;
    let ops = batch.column(n).as_primitive::<Int8Type>().clone();
    (
        batch
            .project(&(0..n).collect::<Vec<_>>())
            .expect("projection"),
        Some(ops),
    )
}

/// Appends row kinds to a batch of data columns.
pub fn attach(batch: &RecordBatch, ops: ArrayRef) -> arrow::error::Result<RecordBatch> {
    let mut columns = batch.columns().to_vec();
    columns.push(ops);
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(with_op_field(&batch.schema()), columns, &options)
}

/// A row-kind column of `rows` rows of kind `kind`.
pub fn kinds(kind: RowKind, rows: usize) -> ArrayRef {
    Arc::new(Int8Array::from(vec![kind as i8; rows]))
}

/// The kind of row `i` (inserts when there is no row-kind column).
pub fn kind_at(ops: Option<&Int8Array>, i: usize) -> RowKind {
    match ops {
        Some(ops) if ops.is_valid(i) => RowKind::from_i8(ops.value(i)),
        _ => RowKind::Insert,
    }
}
