//! The row-at-a-time group aggregate: each group keeps one DataFusion `Accumulator` per
//! aggregate function (retracting ones when the input is a changelog) in a hash map keyed
//! by arrow `Row`s, and each batch is fed to its groups one group at a time. Snapshots
//! write the groups changed since the previous one (`operators::delta`); a group dropped
//! (its rows all retracted, or the state TTL) makes the next one whole.

use super::GroupAggregateFactory;
use crate::operators::aggregate::{
    Accumulators, AggregateInputs, evaluate, keyed_columns_batch, new_accumulators,
    restore_accumulators, state_columns, value_columns,
};
use crate::operators::delta::{DeltaSnapshots, row_key_hashes};
use crate::operators::keys;
use crate::operators::state::{Ttl, now_ms, restored_batches};
use arrow::array::{ArrayRef, AsArray, Int8Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, SchemaRef};
use arrow::row::{OwnedRow, RowConverter};
use async_trait::async_trait;
use datafusion::common::ScalarValue;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use weir_common::changelog::{self, RowKind};
use weir_common::{CheckpointId, Result};
use weir_runtime::{Operator, OperatorState, Output, StateDistribution, TaskInfo};
use weir_sql::AggregateSpec;

/// A row-at-a-time group aggregate for retracting inputs and aggregates the vectorized
/// one does not take.
pub(super) fn create(f: &GroupAggregateFactory, task: &TaskInfo) -> Result<Box<dyn Operator>> {
    Ok(Box::new(GroupAggregate {
        keys: f.keys.clone(),
        aggregates: f.aggregates.clone(),
        retract: f.retract,
        input_schema: f.input_schema.clone(),
        value_types: f.value_types(),
        output: changelog::with_op_field(&f.schema),
        converter: keys::converter(&f.input_schema, &f.keys)?,
        groups: HashMap::new(),
        ttl: Ttl::new(f.state_ttl),
        delta: DeltaSnapshots::new(task.max_parallelism, task.incremental_checkpoints),
        changed: HashSet::new(),
    }))
}

struct Group {
    /// Input rows added minus rows retracted.
    rows: i64,
    accumulators: Accumulators,
    /// When a row last reached the group (for the state TTL).
    touched: u64,
}

struct GroupAggregate {
    keys: Vec<usize>,
    aggregates: Vec<AggregateSpec>,
    retract: bool,
    input_schema: SchemaRef,
    value_types: Vec<DataType>,
    output: SchemaRef,
    converter: RowConverter,
    groups: HashMap<OwnedRow, Group>,
    ttl: Option<Ttl>,
    /// What earlier snapshots wrote, and the groups changed since.
    delta: DeltaSnapshots<OwnedRow>,
    changed: HashSet<OwnedRow>,
}

impl GroupAggregate {
    /// Groups were dropped: the next snapshot writes every group.
    fn start_over(&mut self) {
        self.changed.clear();
        self.delta.start_over();
    }
}

/// The rows of one group within a batch.
struct Touched {
    first: usize,
    added: Vec<u32>,
    retracted: Vec<u32>,
}

#[async_trait]
impl Operator for GroupAggregate {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        let k = keys::width(&self.keys);
        for batch in restored_batches(restored)? {
            let rows = self.converter.convert_columns(&batch.columns()[..k])?;
            let counts = batch.column(k).as_primitive::<Int64Type>().clone();
            for r in 0..batch.num_rows() {
                let accumulators =
                    restore_accumulators(&self.aggregates, self.retract, &batch, k + 1, r)?;
                self.groups.insert(
                    rows.row(r).owned(),
                    Group {
                        rows: counts.value(r),
                        accumulators,
                        touched: now_ms(),
                    },
                );
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
        let (data, ops) = changelog::split(&batch);
        let key_columns = keys::columns(&data, &self.keys);
        let rows = self.converter.convert_columns(&key_columns)?;
        let inputs = AggregateInputs::evaluate(&self.aggregates, &data)?;

        let mut index: HashMap<arrow::row::Row<'_>, usize> = HashMap::new();
        let mut touched: Vec<Touched> = Vec::new();
        for i in 0..data.num_rows() {
            let slot = *index.entry(rows.row(i)).or_insert_with(|| {
                touched.push(Touched {
                    first: i,
                    added: Vec::new(),
                    retracted: Vec::new(),
                });
                touched.len() - 1
            });
            if changelog::kind_at(ops.as_ref(), i).is_retraction() {
                touched[slot].retracted.push(i as u32);
            } else {
                touched[slot].added.push(i as u32);
            }
        }

        let now = now_ms();
        if let Some(cutoff) = self.ttl.as_mut().and_then(|t| t.due(now)) {
            // Expired groups are forgotten without output, as in Flink.
            let before = self.groups.len();
            self.groups.retain(|_, g| g.touched >= cutoff);
            if self.groups.len() < before {
                self.start_over();
            }
        }
        let mut key_rows: Vec<u32> = Vec::new();
        let mut values: Vec<Vec<ScalarValue>> = Vec::new();
        let mut kinds: Vec<i8> = Vec::new();
        let mut emit = |row: usize, v: Vec<ScalarValue>, kind: RowKind| {
            key_rows.push(row as u32);
            values.push(v);
            kinds.push(kind as i8);
        };
        for t in touched {
            let key = rows.row(t.first).owned();
            let old = match self.groups.get_mut(&key) {
                Some(g) => Some(evaluate(&mut g.accumulators)?),
                None if t.added.is_empty() => continue, // retractions of nothing we hold
                None => {
                    let accumulators = new_accumulators(&self.aggregates, self.retract)?;
                    self.groups.insert(
                        key.clone(),
                        Group {
                            rows: 0,
                            accumulators,
                            touched: 0,
                        },
                    );
                    None
                }
            };
            let group = self.groups.get_mut(&key).expect("group");
            group.touched = now;
            inputs.feed(&mut group.accumulators, &t.added, false)?;
            inputs.feed(&mut group.accumulators, &t.retracted, true)?;
            group.rows += t.added.len() as i64 - t.retracted.len() as i64;
            if group.rows <= 0 {
                self.groups.remove(&key);
                // A dropped group is in no later part: the next snapshot is whole.
                self.start_over();
                if let Some(old) = old {
                    emit(t.first, old, RowKind::Delete);
                }
                continue;
            }
            self.changed.insert(key.clone());
            let new = evaluate(&mut group.accumulators)?;
            match old {
                None => emit(t.first, new, RowKind::Insert),
                Some(old) if old != new => {
                    emit(t.first, old, RowKind::UpdateBefore);
                    emit(t.first, new, RowKind::UpdateAfter);
                }
                Some(_) => {}
            }
        }
        if key_rows.is_empty() {
            return Ok(());
        }
        let mut columns = super::output_keys(&self.keys, &key_columns, key_rows)?;
        columns.extend(value_columns(values, &self.value_types)?);
        columns.push(Arc::new(Int8Array::from(kinds)));
        out.emit(RecordBatch::try_new(self.output.clone(), columns)?);
        Ok(())
    }

    fn state_bytes(&self) -> usize {
        self.groups
            .iter()
            .map(|(k, g)| {
                k.row().as_ref().len() + g.accumulators.iter().map(|a| a.size()).sum::<usize>()
            })
            .sum::<usize>()
            + self.delta.size(std::mem::size_of::<OwnedRow>() + 16)
    }

    fn snapshot_state(&mut self, checkpoint: CheckpointId) -> Result<OperatorState> {
        if self.groups.is_empty() {
            self.start_over();
            return Ok(OperatorState::new(StateDistribution::KeyGroups, Vec::new()));
        }
        let changed: Vec<OwnedRow> = match self.delta.whole() {
            true => {
                self.changed.clear();
                self.groups.keys().cloned().collect()
            }
            false => self.changed.drain().collect(),
        };
        let (converter, groups) = (&self.converter, &mut self.groups);
        let (input_schema, keys) = (&self.input_schema, &self.keys);
        let hashes_of = |rows: &[OwnedRow]| row_key_hashes(converter, rows, keys.len());
        let rows_of = |rows: &[OwnedRow]| -> Result<RecordBatch> {
            // Taken out of the map while their accumulators give their state.
            let mut taken: Vec<(OwnedRow, Group)> =
                rows.iter().filter_map(|k| groups.remove_entry(k)).collect();
            let key_columns = converter.convert_rows(taken.iter().map(|(k, _)| k.row()));
            let counts: ArrayRef = Arc::new(arrow::array::Int64Array::from(
                taken.iter().map(|(_, g)| g.rows).collect::<Vec<_>>(),
            ));
            let states = state_columns(taken.iter_mut().map(|(_, g)| &mut g.accumulators));
            groups.extend(taken);
            let mut columns = vec![(Field::new("__rows", DataType::Int64, false), counts)];
            columns.extend(states?);
            keyed_columns_batch(input_schema, keys, key_columns?, columns)
        };
        self.delta.snapshot(checkpoint, changed, hashes_of, rows_of)
    }

    async fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.delta.completed(checkpoint);
        Ok(())
    }
}
