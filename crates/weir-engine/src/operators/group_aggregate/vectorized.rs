//! The vectorized group aggregate, for append-only input.
//!
//! Groups get dense ids from DataFusion's `GroupValues` hash table (interned a batch at a
//! time). Per group the operator keeps its row count, when a row last reached it (for the
//! state TTL), each aggregate's state fields and the values it last emitted, all in
//! per-group columns ([`weir_state::columns`]). A batch is aggregated over the `t` groups
//! it touches, per aggregate:
//!
//! 1. a fresh `GroupsAccumulator` for `t` groups merges the touched groups' stored states
//!    and takes the batch's rows (one `update_batch` call);
//! 2. its state is written back to the touched groups, and a second fresh accumulator
//!    merges that state to evaluate the new values (DataFusion's evaluation consumes an
//!    accumulator);
//! 3. new values are compared with the stored last-emitted ones, column at a time, and
//!    the changes are emitted (`+I` for new groups, `-U`/`+U` for changed ones).
//!
//! So the cost of a batch is proportional to its rows and the groups it touches, never to
//! the groups held.

use super::GroupAggregateFactory;
use crate::operators::aggregate::{
    AggregateInputs, groups_accumulator, keyed_columns_batch, state_field,
};
use crate::operators::delta::{ChangedIds, DeltaSnapshots};
use crate::operators::keys;
use crate::operators::state::{Ttl, now_ms, restored_batches};
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int8Array, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Int64Type, SchemaRef};
use async_trait::async_trait;
use datafusion::logical_expr::EmitTo;
use datafusion::physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion::physical_plan::aggregates::order::GroupOrdering;
use std::sync::Arc;
use weir_common::changelog::{self, RowKind};
use weir_common::{CheckpointId, Error, Result};
use weir_runtime::{Operator, OperatorState, Output, StateDistribution, TaskInfo};
use weir_sql::AggregateSpec;
use weir_state::columns::{GroupColumn, column_of, new_column};

pub(super) fn create(f: &GroupAggregateFactory, task: &TaskInfo) -> Result<Box<dyn Operator>> {
    let key_schema = if f.keys.is_empty() {
        Arc::new(arrow::datatypes::Schema::new(vec![Field::new(
            "__key",
            DataType::Boolean,
            true,
        )]))
    } else {
        keys::nullable(&f.input_schema.project(&f.keys)?)
    };
    let value_types = f.value_types();
    let mut states = Vec::with_capacity(f.aggregates.len());
    for a in &f.aggregates {
        states.push(
            a.function
                .state_fields()?
                .iter()
                .map(|field| new_column(field.data_type()))
                .collect(),
        );
    }
    Ok(Box::new(VectorizedGroupAggregate {
        keys: f.keys.clone(),
        aggregates: f.aggregates.clone(),
        input_schema: f.input_schema.clone(),
        output: changelog::with_op_field(&f.schema),
        groups: new_group_values(key_schema.clone(), &GroupOrdering::None)?,
        key_schema,
        rows: Vec::new(),
        touched: Vec::new(),
        states,
        emitted: value_types.iter().map(new_column).collect(),
        value_types,
        ttl: Ttl::new(f.state_ttl),
        delta: DeltaSnapshots::new(task.max_parallelism, task.incremental_checkpoints),
        changed: ChangedIds::default(),
        ids: Vec::new(),
        slot: Vec::new(),
    }))
}

struct VectorizedGroupAggregate {
    keys: Vec<usize>,
    aggregates: Vec<AggregateSpec>,
    input_schema: SchemaRef,
    /// The group columns, all nullable.
    key_schema: SchemaRef,
    value_types: Vec<DataType>,
    output: SchemaRef,
    /// Group keys to dense group ids.
    groups: Box<dyn GroupValues>,
    /// Input rows per group (a group with none does not exist yet).
    rows: Vec<i64>,
    /// When a row last reached each group (for the state TTL).
    touched: Vec<u64>,
    /// Per aggregate, its state fields per group.
    states: Vec<Vec<Box<dyn GroupColumn>>>,
    /// Per aggregate, the value last emitted per group (of the output's type).
    emitted: Vec<Box<dyn GroupColumn>>,
    ttl: Option<Ttl>,
    /// What earlier snapshots wrote, and the groups changed since.
    delta: DeltaSnapshots<u32>,
    changed: ChangedIds,
    /// Scratch: the group id of each row of the batch.
    ids: Vec<usize>,
    /// Scratch: per group, its position among the batch's touched groups (`u32::MAX`
    /// when untouched; reset after each batch).
    slot: Vec<u32>,
}

/// The groups a batch touches.
struct Touched {
    /// Group ids, in order of first appearance.
    ids: Vec<u32>,
    /// Per touched group, its first row in the batch (where its key is taken from).
    first: Vec<u32>,
    /// Per row, the position of its group in `ids`.
    local: Vec<usize>,
    /// Positions in `ids` of the groups that existed before the batch, ascending.
    existing: Vec<usize>,
}

impl VectorizedGroupAggregate {
    fn grow(&mut self, len: usize) {
        self.rows.resize(len, 0);
        self.touched.resize(len, 0);
        self.slot.resize(len, u32::MAX);
        for column in self.states.iter_mut().flatten().chain(&mut self.emitted) {
            column.grow(len);
        }
    }

    /// Classifies the rows of the batch whose group ids are in `self.ids`, counting them
    /// into their groups.
    fn touch(&mut self, now: u64) -> Touched {
        let mut t = Touched {
            ids: Vec::new(),
            first: Vec::new(),
            local: Vec::with_capacity(self.ids.len()),
            existing: Vec::new(),
        };
        for (row, g) in self.ids.iter().enumerate() {
            let g = *g;
            if self.slot[g] == u32::MAX {
                self.slot[g] = t.ids.len() as u32;
                if self.rows[g] > 0 {
                    t.existing.push(t.ids.len());
                }
                t.ids.push(g as u32);
                t.first.push(row as u32);
                self.touched[g] = now;
            }
            self.rows[g] += 1;
            t.local.push(self.slot[g] as usize);
        }
        for g in &t.ids {
            self.slot[*g as usize] = u32::MAX;
        }
        t
    }

    /// The values of aggregate `a` for states `state` (one row per group).
    fn evaluate(&self, a: usize, state: &[ArrayRef]) -> Result<ArrayRef> {
        let n = state.first().map_or(0, |s| s.len());
        let mut acc = groups_accumulator(&self.aggregates[a])?;
        let ids: Vec<usize> = (0..n).collect();
        acc.merge_batch(state, &ids, n)?;
        let values = acc.evaluate(EmitTo::All)?;
        Ok(if values.data_type() == &self.value_types[a] {
            values
        } else {
            arrow::compute::cast(&values, &self.value_types[a])?
        })
    }

    /// The keys of every group, in id order (`GroupValues` can only hand them out by
    /// emptying itself, so they are interned again into a new table, which gives them
    /// the same ids; some tables cannot be reused after emitting everything).
    fn all_keys(&mut self) -> Result<Vec<ArrayRef>> {
        let keys = self.groups.emit(EmitTo::All)?;
        self.groups = new_group_values(self.key_schema.clone(), &GroupOrdering::None)?;
        let mut ids = Vec::new();
        self.groups.intern(&keys, &mut ids)?;
        debug_assert!(ids.iter().enumerate().all(|(i, g)| i == *g));
        Ok(keys)
    }

    /// Drops the groups no row reached since `cutoff` (without output, as in Flink) by
    /// rebuilding the table and columns from the groups kept.
    fn expire(&mut self, cutoff: u64) -> Result<()> {
        let keep: Vec<u32> = (0..self.rows.len() as u32)
            .filter(|g| self.touched[*g as usize] >= cutoff)
            .collect();
        if keep.len() == self.rows.len() {
            return Ok(());
        }
        let keys = self.groups.emit(EmitTo::All)?;
        let take = UInt32Array::from(keep.clone());
        let keys = keys
            .iter()
            .map(|k| arrow::compute::take(k, &take, None))
            .collect::<Result<Vec<_>, _>>()?;
        self.groups = new_group_values(self.key_schema.clone(), &GroupOrdering::None)?;
        self.groups.intern(&keys, &mut self.ids)?;
        self.rows = keep.iter().map(|g| self.rows[*g as usize]).collect();
        self.touched = keep.iter().map(|g| self.touched[*g as usize]).collect();
        self.slot = vec![u32::MAX; keep.len()];
        for column in self.states.iter_mut().flatten().chain(&mut self.emitted) {
            *column = column_of(&column.gather(&keep)?)?;
        }
        self.changed.clear();
        self.delta.start_over();
        Ok(())
    }

    /// The state rows of groups `ids` (whose keys are in `keys`, in id order): key
    /// columns, `__rows`, then each aggregate's state fields.
    fn rows_of(&self, keys: &[ArrayRef], ids: &[u32]) -> Result<RecordBatch> {
        let take = UInt32Array::from(ids.to_vec());
        let key_columns = keys
            .iter()
            .map(|k| arrow::compute::take(k, &take, None))
            .collect::<Result<Vec<_>, _>>()?;
        let counts: Vec<i64> = ids.iter().map(|g| self.rows[*g as usize]).collect();
        let mut columns = vec![(
            Field::new("__rows", DataType::Int64, false),
            Arc::new(arrow::array::Int64Array::from(counts)) as ArrayRef,
        )];
        for column in self.states.iter().flatten() {
            let values = column.gather(ids)?;
            columns.push((state_field(columns.len() - 1, values.data_type()), values));
        }
        keyed_columns_batch(&self.input_schema, &self.keys, key_columns, columns)
    }
}

/// Where `old` and `new` differ (NULLs equal to each other).
fn changed(old: &ArrayRef, new: &ArrayRef) -> Result<BooleanArray> {
    if let Ok(mask) = arrow::compute::kernels::cmp::distinct(old, new) {
        return Ok(mask);
    }
    // Types the comparison kernels do not take: compare row by row.
    let compare = arrow::array::make_comparator(old, new, Default::default())?;
    Ok((0..old.len())
        .map(|i| Some(compare(i, i) != std::cmp::Ordering::Equal))
        .collect())
}

#[async_trait]
impl Operator for VectorizedGroupAggregate {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        let k = keys::width(&self.keys);
        for batch in restored_batches(restored)? {
            self.groups.intern(&batch.columns()[..k], &mut self.ids)?;
            let ids: Vec<u32> = self.ids.iter().map(|g| *g as u32).collect();
            self.grow(self.groups.len());
            let counts = batch.column(k).as_primitive::<Int64Type>();
            let now = now_ms();
            for (r, g) in ids.iter().enumerate() {
                self.rows[*g as usize] = counts.value(r);
                self.touched[*g as usize] = now;
            }
            for (col, column) in (k + 1..).zip(self.states.iter_mut().flatten()) {
                column.scatter(&ids, batch.column(col))?;
            }
        }
        if self.rows.is_empty() {
            return Ok(());
        }
        // What was last emitted for each group: its values from the restored states.
        let all: Vec<u32> = (0..self.rows.len() as u32).collect();
        for a in 0..self.aggregates.len() {
            let state = self.states[a]
                .iter()
                .map(|c| c.gather(&all))
                .collect::<Result<Vec<_>, _>>()?;
            self.emitted[a] = column_of(&self.evaluate(a, &state)?)?;
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
        if (0..data.num_rows()).any(|i| changelog::kind_at(ops.as_ref(), i).is_retraction()) {
            return Err(Error::Internal(
                "a retraction reached the aggregate of an append-only input".into(),
            ));
        }
        let now = now_ms();
        if let Some(cutoff) = self.ttl.as_mut().and_then(|t| t.due(now)) {
            self.expire(cutoff)?;
        }
        let key_columns = keys::columns(&data, &self.keys);
        self.groups.intern(&key_columns, &mut self.ids)?;
        self.grow(self.groups.len());
        let touched = self.touch(now);
        self.changed.mark(&touched.ids);
        let t = touched.ids.len();
        let existing_ids: Vec<u32> = touched.existing.iter().map(|l| touched.ids[*l]).collect();
        let inputs = AggregateInputs::evaluate(&self.aggregates, &data)?;

        let mut old_values = Vec::with_capacity(self.aggregates.len());
        let mut new_values = Vec::with_capacity(self.aggregates.len());
        let mut changes: Option<BooleanArray> = None;
        let existing_take = UInt32Array::from(
            touched
                .existing
                .iter()
                .map(|l| *l as u32)
                .collect::<Vec<_>>(),
        );
        for a in 0..self.aggregates.len() {
            let mut acc = groups_accumulator(&self.aggregates[a])?;
            if !existing_ids.is_empty() {
                let stored = self.states[a]
                    .iter()
                    .map(|c| c.gather(&existing_ids))
                    .collect::<Result<Vec<_>, _>>()?;
                acc.merge_batch(&stored, &touched.existing, t)?;
            }
            let (values, filter) = inputs.columns(a, None)?;
            acc.update_batch(&values, &touched.local, filter.as_ref(), t)?;
            let state = acc.state(EmitTo::All)?;
            for (column, s) in self.states[a].iter_mut().zip(&state) {
                column.scatter(&touched.ids, s)?;
            }
            let new = self.evaluate(a, &state)?;
            let old = self.emitted[a].gather(&existing_ids)?;
            let differs = changed(&old, &arrow::compute::take(&new, &existing_take, None)?)?;
            changes = Some(match changes {
                None => differs,
                Some(c) => arrow::compute::or(&c, &differs)?,
            });
            self.emitted[a].scatter(&touched.ids, &new)?;
            old_values.push(old);
            new_values.push(new);
        }

        // The changes, in order of the groups' first rows: (0, i) is old value i, (1, l)
        // the new value of touched group l.
        let mut picks: Vec<(usize, usize)> = Vec::with_capacity(2 * t);
        let mut key_rows: Vec<u32> = Vec::with_capacity(2 * t);
        let mut kinds: Vec<i8> = Vec::with_capacity(2 * t);
        let mut existing = touched.existing.iter().enumerate().peekable();
        for l in 0..t {
            match existing.next_if(|(_, e)| **e == l) {
                Some((i, _)) => {
                    if changes.as_ref().is_none_or(|c| !c.value(i)) {
                        continue;
                    }
                    picks.push((0, i));
                    key_rows.push(touched.first[l]);
                    kinds.push(RowKind::UpdateBefore as i8);
                    picks.push((1, l));
                    kinds.push(RowKind::UpdateAfter as i8);
                }
                None => {
                    picks.push((1, l));
                    kinds.push(RowKind::Insert as i8);
                }
            }
            key_rows.push(touched.first[l]);
        }
        if picks.is_empty() {
            return Ok(());
        }
        let mut columns = super::output_keys(&self.keys, &key_columns, key_rows)?;
        for (old, new) in old_values.iter().zip(&new_values) {
            columns.push(arrow::compute::interleave(
                &[old.as_ref() as &dyn Array, new.as_ref()],
                &picks,
            )?);
        }
        columns.push(Arc::new(Int8Array::from(kinds)));
        out.emit(RecordBatch::try_new(self.output.clone(), columns)?);
        Ok(())
    }

    fn state_bytes(&self) -> usize {
        self.groups.size()
            + self.rows.capacity() * 8
            + self.touched.capacity() * 8
            + self
                .states
                .iter()
                .flatten()
                .chain(&self.emitted)
                .map(|c| c.size())
                .sum::<usize>()
            + self.delta.size(4)
    }

    fn snapshot_state(&mut self, checkpoint: CheckpointId) -> Result<OperatorState> {
        if self.rows.is_empty() {
            self.changed.clear();
            self.delta.start_over();
            return Ok(OperatorState::new(StateDistribution::KeyGroups, Vec::new()));
        }
        let changed = match self.delta.whole() {
            true => {
                self.changed.clear();
                (0..self.rows.len() as u32).collect()
            }
            false => self.changed.take(),
        };
        let keys = match changed.is_empty() {
            true => Vec::new(),
            false => self.all_keys()?,
        };
        let hashed = self.keys.len();
        let hashes_of = |ids: &[u32]| -> Result<Vec<u64>> {
            let take = UInt32Array::from(ids.to_vec());
            let columns = keys[..hashed]
                .iter()
                .map(|k| arrow::compute::take(k, &take, None))
                .collect::<Result<Vec<_>, _>>()?;
            let columns: Vec<&dyn Array> = columns.iter().map(|c| c.as_ref()).collect();
            weir_state::key::hash_arrays(&columns, ids.len())
        };
        // The delta bookkeeping is taken out while it reads this aggregate's groups.
        let mut delta = std::mem::replace(&mut self.delta, DeltaSnapshots::new(0, false));
        let state = delta.snapshot(checkpoint, changed, hashes_of, |ids| {
            self.rows_of(&keys, ids)
        });
        self.delta = delta;
        state
    }

    async fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.delta.completed(checkpoint);
        Ok(())
    }
}
