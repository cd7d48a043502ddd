//! `ChangelogNormalize` (Flink's name): turns an upsert stream — `+I`/`+U` rows that replace
//! the row of their key, `-D` rows that carry only the key — into a full changelog, as
//! Flink does after an `upsert-kafka` source. Each key keeps its last row: an upsert of a
//! new key emits `+I`, of a known key `-U` (the old row) and `+U` (the new one), and
//! nothing when the row is unchanged; a delete emits `-D` with the old row, or nothing
//! for an unknown key.
//!
//! Input arrives hash-partitioned by the key columns. State is keyed (one row per key)
//! and snapshotted per key group as rows of the input schema; `table.exec.state.ttl`
//! drops keys untouched that long.

use super::keys;
use super::state::{Ttl, keyed_state, now_ms, restored_batches};
use arrow::array::{Int8Array, RecordBatch};
use arrow::datatypes::SchemaRef;
use arrow::row::{OwnedRow, RowConverter, SortField};
use async_trait::async_trait;
use std::collections::HashMap;
use weir_common::changelog::{self, RowKind};
use weir_common::{CheckpointId, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, StateDistribution, TaskInfo};

/// Creates ChangelogNormalize operators.
pub struct ChangelogNormalizeFactory {
    /// The key columns of the input (the table's primary key).
    pub keys: Vec<usize>,
    /// Schema of the input (and of the output) without the row-kind column.
    pub schema: SchemaRef,
    /// `table.exec.state.ttl`.
    pub state_ttl: Option<std::time::Duration>,
}

impl OperatorFactory for ChangelogNormalizeFactory {
    fn name(&self) -> String {
        format!(
            "ChangelogNormalize(key: {})",
            keys::names(&self.schema, &self.keys)
        )
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let fields = self
            .schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(Box::new(ChangelogNormalize {
            keys: self.keys.clone(),
            schema: keys::nullable(&self.schema),
            output: changelog::with_op_field(&keys::nullable(&self.schema)),
            key_rows: keys::converter(&self.schema, &self.keys)?,
            full_rows: RowConverter::new(fields)?,
            last: HashMap::new(),
            ttl: Ttl::new(self.state_ttl),
            max_parallelism: task.max_parallelism,
        }))
    }
}

struct ChangelogNormalize {
    keys: Vec<usize>,
    schema: SchemaRef,
    output: SchemaRef,
    key_rows: RowConverter,
    full_rows: RowConverter,
    /// Each key's last row, and when it was last touched.
    last: HashMap<OwnedRow, (OwnedRow, u64)>,
    ttl: Option<Ttl>,
    max_parallelism: usize,
}

#[async_trait]
impl Operator for ChangelogNormalize {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        for batch in restored_batches(restored)? {
            let key = self
                .key_rows
                .convert_columns(&keys::columns(&batch, &self.keys))?;
            let full = self.full_rows.convert_columns(batch.columns())?;
            for r in 0..batch.num_rows() {
                self.last
                    .insert(key.row(r).owned(), (full.row(r).owned(), now_ms()));
            }
        }
        Ok(())
    }

    async fn process_batch(
        &mut self,
        _: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()> {
        let (batch, ops) = changelog::split(&batch);
        let key = self
            .key_rows
            .convert_columns(&keys::columns(&batch, &self.keys))?;
        let full = self.full_rows.convert_columns(batch.columns())?;
        let now = now_ms();
        if let Some(cutoff) = self.ttl.as_mut().and_then(|t| t.due(now)) {
            self.last.retain(|_, (_, touched)| *touched >= cutoff);
        }
        let mut rows: Vec<OwnedRow> = Vec::new();
        let mut kinds: Vec<i8> = Vec::new();
        for i in 0..batch.num_rows() {
            let k = key.row(i);
            if changelog::kind_at(ops.as_ref(), i).is_retraction() {
                if let Some((old, _)) = self.last.remove(&k.owned()) {
                    rows.push(old);
                    kinds.push(RowKind::Delete as i8);
                }
                continue;
            }
            let new = full.row(i).owned();
            match self.last.get_mut(&k.owned()) {
                None => {
                    rows.push(new.clone());
                    kinds.push(RowKind::Insert as i8);
                    self.last.insert(k.owned(), (new, now));
                }
                Some((old, touched)) => {
                    *touched = now;
                    if *old == new {
                        continue;
                    }
                    rows.push(std::mem::replace(old, new.clone()));
                    kinds.push(RowKind::UpdateBefore as i8);
                    rows.push(new);
                    kinds.push(RowKind::UpdateAfter as i8);
                }
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        let mut columns = self.full_rows.convert_rows(rows.iter().map(|r| r.row()))?;
        columns.push(std::sync::Arc::new(Int8Array::from(kinds)));
        out.emit(RecordBatch::try_new(self.output.clone(), columns)?);
        Ok(())
    }

    fn state_bytes(&self) -> usize {
        self.last
            .iter()
            .map(|(k, (row, _))| k.row().as_ref().len() + row.row().as_ref().len())
            .sum()
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        if self.last.is_empty() {
            return Ok(OperatorState::new(StateDistribution::KeyGroups, Vec::new()));
        }
        let columns = self
            .full_rows
            .convert_rows(self.last.values().map(|(row, _)| row.row()))?;
        let all = RecordBatch::try_new(self.schema.clone(), columns)?;
        keyed_state(&all, &self.keys, self.max_parallelism)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use std::sync::Arc;

    fn upserts(rows: &[(i64, Option<&str>, RowKind)]) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
        ]);
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap();
        let kinds = Int8Array::from_iter_values(rows.iter().map(|r| r.2 as i8));
        changelog::attach(&batch, Arc::new(kinds)).unwrap()
    }

    fn shown(out: &mut Output) -> Vec<String> {
        out.take()
            .into_iter()
            .flat_map(|item| match item {
                weir_runtime::StreamItem::Batch(b) => {
                    let (data, ops) = changelog::split(&b);
                    let ops = ops.unwrap();
                    (0..b.num_rows())
                        .map(|i| {
                            let v = data.column(1).as_string::<i32>();
                            format!(
                                "{}[{}, {}]",
                                RowKind::from_i8(ops.value(i)).short(),
                                data.column(0).as_primitive::<Int64Type>().value(i),
                                if v.is_null(i) { "null" } else { v.value(i) }
                            )
                        })
                        .collect::<Vec<_>>()
                }
                _ => Vec::new(),
            })
            .collect()
    }

    #[tokio::test]
    async fn upserts_and_deletes_become_a_changelog_and_survive_a_restore() {
        let schema = upserts(&[]).schema();
        let factory = ChangelogNormalizeFactory {
            keys: vec![0],
            schema: Arc::new(schema.project(&[0, 1]).unwrap()),
            state_ttl: None,
        };
        let task = crate::batch::task("normalize");
        let mut op = factory.create(&task).unwrap();
        op.open(None).await.unwrap();
        let mut out = Output::default();
        use RowKind::*;
        let input = upserts(&[
            (1, Some("a"), Insert),
            (2, Some("b"), Insert),
            (1, Some("a"), Insert),
            (1, Some("c"), UpdateAfter),
            (3, None, Delete),
            (2, None, Delete),
        ]);
        op.process_batch(0, input, &mut out).await.unwrap();
        assert_eq!(
            shown(&mut out),
            ["+I[1, a]", "+I[2, b]", "-U[1, a]", "+U[1, c]", "-D[2, b]"]
        );
        let state = op.snapshot_state(CheckpointId(1)).unwrap();
        let mut again = factory.create(&task).unwrap();
        again.open(Some(state)).await.unwrap();
        let input = upserts(&[(1, None, Delete), (2, Some("d"), Insert)]);
        again.process_batch(0, input, &mut out).await.unwrap();
        assert_eq!(shown(&mut out), ["-D[1, c]", "+I[2, d]"]);
    }
}
