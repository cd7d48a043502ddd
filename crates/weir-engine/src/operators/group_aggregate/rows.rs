//! The row-at-a-time group aggregate: each group keeps one DataFusion `Accumulator` per
//! aggregate function (retracting ones when the input is a changelog) in a hash map keyed
//! by arrow `Row`s, and each batch is fed to its groups one group at a time. Snapshots
//! write the groups changed since the previous one (`operators::delta`); a group dropped
//! (its rows all retracted, or the state TTL) makes the next one whole.
//!
//! Under a memory budget (`taskmanager.memory.managed.size`) the least recently used
//! groups move to local disk while the job's keyed state is over it
//! ([`weir_state::cold`]), each as its snapshot row (key, `__rows`, states) in arrow's
//! row format, and come back when a row reaches them.

use super::GroupAggregateFactory;
use crate::operators::aggregate::{
    Accumulators, AggregateInputs, evaluate, keyed_columns_batch, new_accumulators,
    restore_accumulators, state_columns, value_columns,
};
use crate::operators::delta::{DeltaSnapshots, every_key, row_key_hashes};
use crate::operators::keys;
use crate::operators::state::{Ttl, item_batches, now_ms};
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
use weir_state::cold::{self, ColdEntries};

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
        delta: DeltaSnapshots::new(task.max_parallelism, task.incremental_checkpoints)
            .on_disk(f.state_memory.clone()),
        changed: HashSet::new(),
        cold: ColdEntries::new(f.state_memory.clone()),
        cold_rows: None,
        hot_bytes: 0,
    }))
}

struct Group {
    /// Input rows added minus rows retracted.
    rows: i64,
    accumulators: Accumulators,
    /// When a row last reached the group (for the state TTL).
    touched: u64,
    /// What it takes in memory, as [`Group::measure`] last found.
    bytes: u64,
}

impl Group {
    /// Memory of a group besides its key's bytes and its accumulators (about).
    const OVERHEAD: usize = 96;

    /// Measures what the group (of key `key`) takes in memory; returns how much that
    /// grew (negative: shrank).
    fn measure(&mut self, key: &OwnedRow) -> i64 {
        let bytes = (Self::OVERHEAD
            + key.row().as_ref().len()
            + self.accumulators.iter().map(|a| a.size()).sum::<usize>()) as u64;
        let grew = bytes as i64 - self.bytes as i64;
        self.bytes = bytes;
        grew
    }
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
    /// Groups moved to disk (see the module docs).
    cold: ColdEntries,
    /// The schema of the groups' snapshot rows and their row format, once groups moved
    /// (`None` inside when the row format does not take the state's types).
    cold_rows: Option<Option<(SchemaRef, RowConverter)>>,
    /// What the groups in `groups` take, as their `bytes` say.
    hot_bytes: u64,
}

impl GroupAggregate {
    /// Groups were dropped: the next snapshot writes every group.
    fn start_over(&mut self) {
        self.changed.clear();
        self.delta.start_over();
    }

    fn layout(&self) -> StateLayout<'_> {
        StateLayout {
            converter: &self.converter,
            input_schema: &self.input_schema,
            keys: &self.keys,
            aggregates: &self.aggregates,
            retract: self.retract,
        }
    }

    /// The groups of snapshot rows `batch` (key columns, `__rows`, states).
    fn groups_of(&self, batch: &RecordBatch) -> Result<Vec<(OwnedRow, Group)>> {
        let k = keys::width(&self.keys);
        let rows = self.converter.convert_columns(&batch.columns()[..k])?;
        let counts = batch.column(k).as_primitive::<Int64Type>();
        let now = now_ms();
        (0..batch.num_rows())
            .map(|r| {
                let key = rows.row(r).owned();
                let mut group = Group {
                    rows: counts.value(r),
                    accumulators: restore_accumulators(
                        &self.aggregates,
                        self.retract,
                        batch,
                        k + 1,
                        r,
                    )?,
                    touched: now,
                    bytes: 0,
                };
                group.measure(&key);
                Ok((key, group))
            })
            .collect()
    }

    /// Keeps `group` in memory.
    fn keep(&mut self, key: OwnedRow, group: Group) {
        self.hot_bytes += group.bytes;
        if let Some(old) = self.groups.insert(key, group) {
            self.hot_bytes -= old.bytes;
        }
    }

    /// Takes the groups of `keys` that are on disk back into memory.
    fn bring_back(&mut self, keys: impl Iterator<Item = OwnedRow>) -> Result<()> {
        let mut values = Vec::new();
        for key in keys {
            let k = key.row();
            if !self.groups.contains_key(&key)
                && let Some((value, _)) = self.cold.take(cold::hash(k.as_ref()), k.as_ref())?
            {
                values.push(value);
            }
        }
        if values.is_empty() {
            return Ok(());
        }
        let batch = super::from_disk(self.cold_rows.as_ref().and_then(|c| c.as_ref()), &values)?;
        for (key, group) in self.groups_of(&batch)? {
            self.keep(key, group);
        }
        Ok(())
    }

    /// While the job's state is over its budget, moves the least recently used groups to
    /// disk.
    fn relieve(&mut self) -> Result<()> {
        // (The snapshot parts waiting for their checkpoint in memory count too.)
        let held = self.delta.held();
        if !self.cold.set_hot(self.hot_bytes + held) || matches!(self.cold_rows, Some(None)) {
            return Ok(());
        }
        let moving = cold::least_recently_used(
            self.groups.iter().map(|(k, g)| (k, g.touched)),
            |k| self.groups[*k].bytes,
            self.hot_bytes,
            self.cold.hot_target(),
        );
        let moving: Vec<(OwnedRow, u64)> = (moving.into_iter())
            .map(|(k, bytes)| (k.clone(), bytes))
            .collect();
        if moving.is_empty() {
            return Ok(()); // what is over budget is the index of the groups on disk
        }
        let mut taken: Vec<(OwnedRow, Group)> = (moving.iter())
            .map(|(k, _)| self.groups.remove_entry(k).expect("a kept group"))
            .collect();
        self.hot_bytes -= moving.iter().map(|(_, bytes)| bytes).sum::<u64>();
        let batch = state_batch(&self.layout(), &mut taken)?;
        if self.cold_rows.is_none() {
            self.cold_rows = Some(crate::operators::aggregate::state_row_format(
                batch.schema(),
            ));
        }
        let Some(Some((_, codec))) = &self.cold_rows else {
            // A state type the row format does not take: the groups stay.
            for (key, group) in taken {
                self.keep(key, group);
            }
            return Ok(());
        };
        let rows = codec.convert_columns(batch.columns())?;
        for (i, (key, group)) in taken.into_iter().enumerate() {
            let k = key.row();
            let value = rows.row(i);
            if !self.cold.put(
                cold::hash(k.as_ref()),
                k.as_ref(),
                value.as_ref(),
                group.touched,
            )? {
                self.keep(key, group);
            }
        }
        self.cold.set_hot(self.hot_bytes + held);
        Ok(())
    }
}

/// What the snapshot rows of groups are made with.
#[derive(Clone, Copy)]
struct StateLayout<'a> {
    converter: &'a RowConverter,
    input_schema: &'a SchemaRef,
    keys: &'a [usize],
    aggregates: &'a [AggregateSpec],
    retract: bool,
}

/// The snapshot rows of `groups`: key columns, `__rows`, each aggregate's state fields.
fn state_batch(s: &StateLayout<'_>, groups: &mut [(OwnedRow, Group)]) -> Result<RecordBatch> {
    let StateLayout {
        converter,
        input_schema,
        keys,
        aggregates,
        retract,
    } = *s;
    let key_columns = converter.convert_rows(groups.iter().map(|(k, _)| k.row()));
    let counts: ArrayRef = Arc::new(arrow::array::Int64Array::from(
        groups.iter().map(|(_, g)| g.rows).collect::<Vec<_>>(),
    ));
    let states = state_columns(
        aggregates,
        retract,
        groups.iter_mut().map(|(_, g)| &mut g.accumulators),
    );
    let mut columns = vec![(Field::new("__rows", DataType::Int64, false), counts)];
    columns.extend(states?);
    keyed_columns_batch(input_schema, keys, key_columns?, columns)
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
        // A group in a later part of its key group replaces its earlier state.
        let Some(state) = restored else {
            return Ok(());
        };
        for item in &state.items {
            for batch in item_batches(&state, item)? {
                for (key, group) in self.groups_of(&batch)? {
                    // A group on disk from an earlier part: this part replaces it.
                    let k = key.row();
                    self.cold.take(cold::hash(k.as_ref()), k.as_ref())?;
                    self.keep(key, group);
                }
                self.relieve()?;
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
            let mut freed = 0;
            self.groups.retain(|_, g| {
                let keep = g.touched >= cutoff;
                if !keep {
                    freed += g.bytes;
                }
                keep
            });
            self.hot_bytes -= freed;
            if freed > 0 || self.cold.expire(cutoff)? > 0 {
                self.start_over();
            }
        }
        if !self.cold.is_empty() {
            self.bring_back(touched.iter().map(|t| rows.row(t.first).owned()))?;
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
                            bytes: 0,
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
            self.hot_bytes = self.hot_bytes.saturating_add_signed(group.measure(&key));
            if group.rows <= 0 {
                let dropped = self.groups.remove(&key).expect("group");
                self.hot_bytes -= dropped.bytes;
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
        self.relieve()?;
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
        (self.hot_bytes + self.cold.on_disk()) as usize
            + self.delta.size(std::mem::size_of::<OwnedRow>() + 16)
    }

    fn snapshot_state(&mut self, checkpoint: CheckpointId) -> Result<OperatorState> {
        if self.groups.is_empty() && self.cold.is_empty() {
            self.start_over();
            return Ok(OperatorState::new(StateDistribution::KeyGroups, Vec::new()));
        }
        let changed: Vec<OwnedRow> = match self.delta.whole() {
            true => {
                self.changed.clear();
                every_key(self.groups.keys(), &self.cold, &self.converter)?
            }
            false => self.changed.drain().collect(),
        };
        let layout = StateLayout {
            converter: &self.converter,
            input_schema: &self.input_schema,
            keys: &self.keys,
            aggregates: &self.aggregates,
            retract: self.retract,
        };
        let groups = &mut self.groups;
        let (on_disk, cold_rows) = (&self.cold, self.cold_rows.as_ref().and_then(|c| c.as_ref()));
        let hashes_of =
            |rows: &[OwnedRow]| row_key_hashes(layout.converter, rows, layout.keys.len());
        let rows_of = |rows: &[OwnedRow]| -> Result<RecordBatch> {
            // Taken out of the map while their accumulators give their state.
            let mut taken = Vec::new();
            let mut values = Vec::new();
            for key in rows {
                match groups.remove_entry(key) {
                    Some(group) => taken.push(group),
                    None => values
                        .extend(on_disk.get(cold::hash(key.row().as_ref()), key.row().as_ref())?),
                }
            }
            let in_memory = state_batch(&layout, &mut taken);
            groups.extend(taken);
            match (values.is_empty(), in_memory?) {
                (true, batch) => Ok(batch),
                (false, batch) if batch.num_rows() == 0 => super::from_disk(cold_rows, &values),
                (false, batch) => Ok(arrow::compute::concat_batches(
                    &batch.schema(),
                    [&batch, &super::from_disk(cold_rows, &values)?],
                )?),
            }
        };
        self.delta.snapshot(checkpoint, changed, hashes_of, rows_of)
    }

    async fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.delta.completed(checkpoint);
        Ok(())
    }
}
