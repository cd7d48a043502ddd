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
//!
//! Each group also keeps its key's hash ([`weir_state::key`]), which names it in delta
//! snapshots and on disk: under a memory budget (`taskmanager.memory.managed.size`) the
//! least recently used groups move to local disk while the job's keyed state is over it
//! ([`weir_state::cold`], each as its snapshot row in arrow's row format), and the table
//! and columns are rebuilt from the groups kept, as the state TTL does. A new group of a
//! batch whose hash is on disk takes its state back from there.

use super::GroupAggregateFactory;
use crate::operators::aggregate::{
    AggregateInputs, groups_accumulator, keyed_columns_batch, state_field,
};
use crate::operators::delta::{ChangedIds, DeltaSnapshots};
use crate::operators::keys;
use crate::operators::state::{Ttl, item_batches, now_ms};
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int8Array, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Int64Type, SchemaRef};
use arrow::row::{RowConverter, SortField};
use async_trait::async_trait;
use datafusion::logical_expr::EmitTo;
use datafusion::physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion::physical_plan::aggregates::order::GroupOrdering;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use weir_common::changelog::{self, RowKind};
use weir_common::{CheckpointId, Error, Result};
use weir_runtime::{Operator, OperatorState, Output, StateDistribution, TaskInfo};
use weir_sql::AggregateSpec;
use weir_state::cold::ColdEntries;
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
    let key_rows = RowConverter::new(
        (key_schema.fields().iter())
            .map(|f| SortField::new(f.data_type().clone()))
            .collect(),
    )?;
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
        delta: DeltaSnapshots::new(task.max_parallelism, task.incremental_checkpoints)
            .on_disk(f.state_memory.clone()),
        changed: ChangedIds::default(),
        changed_hashes: HashSet::new(),
        hashes: Vec::new(),
        cold: ColdEntries::new(f.state_memory.clone()),
        key_rows,
        cold_rows: None,
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
    /// What earlier snapshots wrote (keys are key hashes), and the groups changed since:
    /// by id, and by hash for those that moved to disk or were renumbered since.
    delta: DeltaSnapshots<u64>,
    changed: ChangedIds,
    changed_hashes: HashSet<u64>,
    /// Each group's key hash.
    hashes: Vec<u64>,
    /// Groups moved to disk (see the module docs).
    cold: ColdEntries,
    /// The key columns' row format: a key's bytes on disk.
    key_rows: RowConverter,
    /// The schema of the groups' snapshot rows and their row format, once groups moved
    /// (`None` inside when the row format does not take the state's types).
    cold_rows: Option<Option<(SchemaRef, RowConverter)>>,
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
        self.hashes.resize(len, 0);
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

    /// Drops the groups no row reached since `cutoff` (without output, as in Flink), in
    /// memory and on disk.
    fn expire(&mut self, cutoff: u64) -> Result<()> {
        let expired_on_disk = self.cold.expire(cutoff)?;
        let keep: Vec<u32> = (0..self.rows.len() as u32)
            .filter(|g| self.touched[*g as usize] >= cutoff)
            .collect();
        if keep.len() == self.rows.len() && expired_on_disk == 0 {
            return Ok(());
        }
        if keep.len() < self.rows.len() {
            let keys = self.groups.emit(EmitTo::All)?;
            self.retain(&keys, &keep)?;
        }
        self.changed.clear();
        self.changed_hashes.clear();
        self.delta.start_over();
        Ok(())
    }

    /// Rebuilds the table and the columns from the groups `keep` (ascending ids), whose
    /// keys are among `keys` (every group's, in id order): the groups get new ids.
    fn retain(&mut self, keys: &[ArrayRef], keep: &[u32]) -> Result<()> {
        let take = UInt32Array::from(keep.to_vec());
        let keys = keys
            .iter()
            .map(|k| arrow::compute::take(k, &take, None))
            .collect::<Result<Vec<_>, _>>()?;
        self.groups = new_group_values(self.key_schema.clone(), &GroupOrdering::None)?;
        self.groups.intern(&keys, &mut self.ids)?;
        self.rows = keep.iter().map(|g| self.rows[*g as usize]).collect();
        self.touched = keep.iter().map(|g| self.touched[*g as usize]).collect();
        self.hashes = keep.iter().map(|g| self.hashes[*g as usize]).collect();
        self.slot = vec![u32::MAX; keep.len()];
        for column in self.states.iter_mut().flatten().chain(&mut self.emitted) {
            *column = column_of(&column.gather(keep)?)?;
        }
        Ok(())
    }

    /// Sets the hashes of the groups new since there were `before` (the batch's rows are
    /// in `self.ids`); returns each new group's first row, id and hash.
    fn hash_new_groups(
        &mut self,
        key_columns: &[ArrayRef],
        before: usize,
    ) -> Result<Vec<(usize, usize, u64)>> {
        if self.groups.len() == before {
            return Ok(Vec::new());
        }
        let mut seen = vec![false; self.groups.len() - before];
        let mut first: Vec<(usize, usize)> = Vec::with_capacity(seen.len());
        for (row, g) in self.ids.iter().enumerate() {
            if *g >= before && !std::mem::replace(&mut seen[*g - before], true) {
                first.push((row, *g));
            }
        }
        let take = UInt32Array::from_iter_values(first.iter().map(|(row, _)| *row as u32));
        let hashed = key_columns[..self.keys.len()]
            .iter()
            .map(|c| arrow::compute::take(c, &take, None))
            .collect::<Result<Vec<_>, _>>()?;
        let hashed: Vec<&dyn Array> = hashed.iter().map(|c| c.as_ref()).collect();
        let hashes = weir_state::key::hash_arrays(&hashed, first.len())?;
        Ok((first.into_iter().zip(hashes))
            .map(|((row, g), h)| {
                self.hashes[g] = h;
                (row, g, h)
            })
            .collect())
    }

    /// The new groups `new` (first row, id, hash) of a batch whose keys (`key_columns`)
    /// are on disk: taken out of there, and when `restore` their state is set from it
    /// (otherwise a restore's state replaces it).
    fn take_from_disk(
        &mut self,
        key_columns: &[ArrayRef],
        new: &[(usize, usize, u64)],
        restore: bool,
    ) -> Result<()> {
        let mut key_rows = None;
        let (mut ids, mut values) = (Vec::new(), Vec::new());
        for (row, g, h) in new {
            if !self.cold.may_hold(*h) {
                continue;
            }
            if key_rows.is_none() {
                key_rows = Some(self.key_rows.convert_columns(key_columns)?);
            }
            let key = key_rows.as_ref().expect("converted").row(*row);
            if let Some((value, _)) = self.cold.take(*h, key.as_ref())? {
                ids.push(*g as u32);
                values.push(value);
            }
        }
        if ids.is_empty() || !restore {
            return Ok(());
        }
        let batch = super::from_disk(self.cold_rows.as_ref().and_then(|c| c.as_ref()), &values)?;
        let k = keys::width(&self.keys);
        let counts = batch.column(k).as_primitive::<Int64Type>();
        for (r, g) in ids.iter().enumerate() {
            self.rows[*g as usize] = counts.value(r);
        }
        for (col, column) in (k + 1..).zip(self.states.iter_mut().flatten()) {
            column.scatter(&ids, batch.column(col))?;
        }
        for a in 0..self.aggregates.len() {
            let state = self.states[a]
                .iter()
                .map(|c| c.gather(&ids))
                .collect::<Result<Vec<_>, _>>()?;
            let values = self.evaluate(a, &state)?;
            self.emitted[a].scatter(&ids, &values)?;
        }
        Ok(())
    }

    /// What the groups in memory take (about).
    fn hot_bytes(&self) -> u64 {
        (self.groups.size()
            + self.rows.len() * 24
            + (self.states.iter().flatten().chain(&self.emitted))
                .map(|c| c.size())
                .sum::<usize>()) as u64
    }

    /// While the job's state is over its budget, moves the least recently used groups to
    /// disk (their share of what the groups take) and rebuilds the table from the rest.
    fn relieve(&mut self) -> Result<()> {
        let hot = self.hot_bytes();
        // (The snapshot parts waiting for their checkpoint in memory count too.)
        let over = self.cold.set_hot(hot + self.delta.held());
        if self.keys.is_empty() || self.rows.is_empty() || !over {
            return Ok(());
        }
        if matches!(self.cold_rows, Some(None)) {
            return Ok(()); // state types the row format does not take
        }
        let n = self.rows.len();
        let kept = (n as u128 * self.cold.hot_target() as u128 / hot.max(1) as u128) as usize;
        let moving = n - kept.min(n - 1);
        let mut oldest: Vec<u32> = (0..n as u32).collect();
        oldest.select_nth_unstable_by_key(moving - 1, |g| self.touched[*g as usize]);
        let mut moving: Vec<u32> = oldest[..moving].to_vec();
        moving.sort_unstable();
        let keys = self.groups.emit(EmitTo::All)?;
        let batch = self.rows_of(&keys, &moving)?;
        if self.cold_rows.is_none() {
            self.cold_rows = Some(crate::operators::aggregate::state_row_format(
                batch.schema(),
            ));
        }
        let mut stays = vec![true; n];
        if let Some(Some((_, codec))) = &self.cold_rows {
            let k = keys::width(&self.keys);
            let values = codec.convert_columns(batch.columns())?;
            let key_rows = self.key_rows.convert_columns(&batch.columns()[..k])?;
            for g in self.changed.take() {
                self.changed_hashes.insert(self.hashes[g as usize]);
            }
            for (i, g) in moving.iter().enumerate() {
                let g = *g as usize;
                stays[g] = !self.cold.put(
                    self.hashes[g],
                    key_rows.row(i).as_ref(),
                    values.row(i).as_ref(),
                    self.touched[g],
                )?;
            }
        }
        let keep: Vec<u32> = (0..n as u32).filter(|g| stays[*g as usize]).collect();
        self.retain(&keys, &keep)?;
        self.cold.set_hot(self.hot_bytes() + self.delta.held());
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
        let Some(state) = restored else {
            return Ok(());
        };
        for item in &state.items {
            for batch in item_batches(&state, item)? {
                let before = self.rows.len();
                let key_columns = &batch.columns()[..k];
                self.groups.intern(key_columns, &mut self.ids)?;
                self.grow(self.groups.len());
                let new = self.hash_new_groups(key_columns, before)?;
                if !new.is_empty() && !self.cold.is_empty() {
                    // A key that moved to disk from an earlier part: this part replaces it.
                    self.take_from_disk(key_columns, &new, false)?;
                }
                let ids: Vec<u32> = self.ids.iter().map(|g| *g as u32).collect();
                let counts = batch.column(k).as_primitive::<Int64Type>();
                let now = now_ms();
                for (r, g) in ids.iter().enumerate() {
                    self.rows[*g as usize] = counts.value(r);
                    self.touched[*g as usize] = now;
                }
                for (col, column) in (k + 1..).zip(self.states.iter_mut().flatten()) {
                    column.scatter(&ids, batch.column(col))?;
                }
                self.relieve()?;
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
        let before = self.rows.len();
        self.groups.intern(&key_columns, &mut self.ids)?;
        self.grow(self.groups.len());
        let new = self.hash_new_groups(&key_columns, before)?;
        if !new.is_empty() && !self.cold.is_empty() {
            self.take_from_disk(&key_columns, &new, true)?;
        }
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
        self.relieve()?;

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
        (self.hot_bytes() + self.cold.on_disk()) as usize + self.delta.size(8)
    }

    fn snapshot_state(&mut self, checkpoint: CheckpointId) -> Result<OperatorState> {
        if self.rows.is_empty() && self.cold.is_empty() {
            self.changed.clear();
            self.changed_hashes.clear();
            self.delta.start_over();
            return Ok(OperatorState::new(StateDistribution::KeyGroups, Vec::new()));
        }
        let mut changed: Vec<u64> = match self.delta.whole() {
            true => {
                self.changed.clear();
                self.changed_hashes.clear();
                self.hashes
                    .iter()
                    .copied()
                    .chain(self.cold.hashes())
                    .collect()
            }
            false => {
                let ids = self.changed.take();
                let by_id = ids.iter().map(|g| self.hashes[*g as usize]);
                by_id.chain(self.changed_hashes.drain()).collect()
            }
        };
        changed.sort_unstable();
        changed.dedup();
        let keys = match changed.is_empty() || self.rows.is_empty() {
            true => Vec::new(),
            false => self.all_keys()?,
        };
        let mut by_hash: HashMap<u64, Vec<u32>> = HashMap::new();
        if !changed.is_empty() {
            for (g, h) in self.hashes.iter().enumerate() {
                by_hash.entry(*h).or_default().push(g as u32);
            }
        }
        // The delta bookkeeping is taken out while it reads this aggregate's groups.
        let mut delta = std::mem::replace(&mut self.delta, DeltaSnapshots::new(0, false));
        let state = delta.snapshot(
            checkpoint,
            changed,
            |hashes| Ok(hashes.to_vec()),
            |hashes| {
                let mut ids = Vec::new();
                let mut values = Vec::new();
                for h in hashes {
                    ids.extend(by_hash.get(h).into_iter().flatten());
                    if let Some((_, value)) = self.cold.get_by_hash(*h)? {
                        values.push(value);
                    }
                }
                ids.sort_unstable();
                let codec = self.cold_rows.as_ref().and_then(|c| c.as_ref());
                match (ids.is_empty(), values.is_empty()) {
                    (_, true) if !keys.is_empty() => self.rows_of(&keys, &ids),
                    (true, false) => super::from_disk(codec, &values),
                    (false, false) => {
                        let hot = self.rows_of(&keys, &ids)?;
                        let cold = super::from_disk(codec, &values)?;
                        Ok(arrow::compute::concat_batches(
                            &hot.schema(),
                            [&hot, &cold],
                        )?)
                    }
                    _ => Err(Error::internal(
                        "a changed group is neither in memory nor on disk",
                    )),
                }
            },
        );
        self.delta = delta;
        state
    }

    async fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.delta.completed(checkpoint);
        Ok(())
    }
}
