//! `Join`: regular (unbounded) inner, outer, semi and anti equi-joins, of append-only or
//! updating inputs.
//!
//! Both inputs arrive hash-partitioned by their join columns. Every row is stored under its
//! key and joined with the rows of the other side stored before it, so each matching pair
//! is emitted exactly once, by whichever row came second. Rows with a NULL key never match.
//! A semi join emits each row of its kept side once, when it first has a match (that
//! passes the extra condition, if there is one), and
//! remembers (also in checkpoints) which kept rows it emitted. An outer join emits a row of
//! an outer side that has no match padded with NULLs (`+I`) and retracts it (`-D`) when
//! its first match arrives: its output is a changelog; which outer rows have matched is
//! kept (and checkpointed) the same way. An anti join (`NOT EXISTS`) emits a kept row
//! that arrives without a match and retracts it when its first match arrives.
//! A join with an updating input (a changelog) removes a stored row when an equal row is
//! retracted (`-U`/`-D`) and emits the retracted joined rows with that kind; its output is
//! a changelog. Rows of outer and kept sides count their matches instead of a flag.
//! Retracted rows are compacted away once they outnumber live ones. A null-aware anti join
//! (`NOT IN`) also counts the right side's rows and NULL keys (one subtask).
//! The state grows with the input unless a state TTL drops rows stored longer ago. Past
//! the job's state memory budget, the oldest stored rows of an append-only input move to
//! local disk (see [`weir_state::spill`]); the index of keys and the rows' flags stay in
//! memory. The state is keyed, so a snapshot stores each key group's rows (Arrow IPC per
//! side, epoch and key group; see [`snapshot`]) and a restore at another parallelism hands
//! them to their new owners.

mod snapshot;

use super::state::{Ttl, now_ms};
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::SchemaRef;
use arrow::row::{OwnedRow, RowConverter, SortField};
use async_trait::async_trait;
use snapshot::Epochs;
use std::collections::HashMap;
use std::sync::Arc;
use weir_common::changelog::{self, RowKind};
use weir_common::{CheckpointId, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, TaskInfo};
use weir_sql::JoinKind;
use weir_sql::plan::PhysicalExprRef;
use weir_state::spill::{BatchStore, StateMemory};

/// Creates join operators.
pub struct JoinOperatorFactory {
    /// Inner or semi join.
    pub kind: JoinKind,
    /// Join columns of the left (input 0) and right (input 1) side.
    pub keys: [Vec<usize>; 2],
    /// Schemas of the two inputs.
    pub inputs: [SchemaRef; 2],
    /// Extra condition over the joined row (left columns, then right columns).
    pub filter: Option<PhysicalExprRef>,
    /// Per side, `(time column, offset)`: a stored row goes once `time + offset <=
    /// watermark` (window and interval joins).
    pub expiry: [Option<(usize, i64)>; 2],
    /// Output schema: left columns, then right columns.
    pub schema: SchemaRef,
    /// `table.exec.state.ttl`: stored rows older than this are dropped.
    pub state_ttl: Option<std::time::Duration>,
    /// The job's state memory budget: stored rows past it move to local disk.
    pub state_memory: Option<Arc<StateMemory>>,
    /// An input is a changelog (inner and outer joins): the output is one too.
    pub updating: bool,
    /// A null-aware left anti join (`NOT IN`); it runs as one subtask.
    pub null_aware: bool,
}

impl JoinOperatorFactory {
    /// Which sides may keep stored rows on disk: those of append-only inputs (their flags,
    /// a bit per row, stay in memory). Rows that retractions take back, and the rows of a
    /// null-aware anti join, which its first NULL on the right reads whole, stay in memory.
    fn spillable(&self) -> [bool; 2] {
        [0, 1].map(|_| !self.updating && !self.null_aware)
    }
}

/// Whether `side`'s stored rows carry state of their own (in checkpoints too): a semi or
/// anti join's kept side (emitted, or its match count), an outer side (matched).
fn flagged(kind: JoinKind, side: usize) -> bool {
    match kind {
        JoinKind::Inner => false,
        JoinKind::LeftSemi | JoinKind::LeftOuter | JoinKind::LeftAnti => side == 0,
        JoinKind::RightSemi | JoinKind::RightOuter | JoinKind::RightAnti => side == 1,
        JoinKind::FullOuter => true,
    }
}

impl OperatorFactory for JoinOperatorFactory {
    fn name(&self) -> String {
        let names = |s: usize| {
            self.keys[s]
                .iter()
                .map(|k| self.inputs[s].field(*k).name().clone())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let window = if self.expiry.iter().any(Option::is_some) {
            ", state cleaned by watermark"
        } else if self.null_aware {
            ", null-aware"
        } else {
            ""
        };
        format!(
            "Join({:?}: [{}] = [{}]{window})",
            self.kind,
            names(0),
            names(1)
        )
    }
    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let spillable = self.spillable();
        let side = |s: usize| -> Result<Side> {
            let fields = self.keys[s]
                .iter()
                .map(|k| SortField::new(self.inputs[s].field(*k).data_type().clone()))
                .collect();
            let all_fields = self.inputs[s]
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect();
            Ok(Side {
                keys: self.keys[s].clone(),
                converter: RowConverter::new(fields)?,
                full: RowConverter::new(all_fields)?,
                dead: std::collections::HashSet::new(),
                matches: HashMap::new(),
                stored: BatchStore::new(
                    self.inputs[s].clone(),
                    self.state_memory.clone().filter(|_| spillable[s]),
                ),
                positions: 0,
                index: HashMap::new(),
                emitted: Vec::new(),
                born: Vec::new(),
                expiry: self.expiry[s],
                latest: Vec::new(),
                first: i64::MAX,
                epochs: Epochs::default(),
            })
        };
        Ok(Box::new(JoinOperator {
            kind: self.kind,
            sides: [side(0)?, side(1)?],
            inputs: self.inputs.clone(),
            filter: self.filter.clone(),
            combined: Arc::new(arrow::datatypes::Schema::new(
                self.inputs
                    .iter()
                    .flat_map(|s| {
                        s.fields()
                            .iter()
                            .map(|f| f.as_ref().clone().with_nullable(true))
                    })
                    .collect::<Vec<_>>(),
            )),
            schema: self.schema.clone(),
            ttl: Ttl::new(self.state_ttl),
            max_parallelism: task.max_parallelism,
            key_groups: weir_state::key::key_group_range(
                task.subtask,
                task.parallelism,
                task.max_parallelism,
            ),
            updating: self.updating,
            null_aware: self.null_aware,
            right_rows: 0,
            right_nulls: 0,
            incremental: task.incremental_checkpoints,
        }))
    }
}

struct Side {
    keys: Vec<usize>,
    converter: RowConverter,
    /// Converts whole rows, to find the stored row a retraction takes back.
    full: RowConverter,
    /// Stored rows taken back by retractions (no longer in the index).
    dead: std::collections::HashSet<(usize, usize)>,
    /// Outer side of a join with an updating input: how many rows of the other side
    /// match each stored row (absent: none, the NULL-padded row is out).
    matches: HashMap<(usize, usize), u32>,
    /// The stored rows, in memory or on local disk; positions are `(batch, row)`.
    stored: BatchStore,
    /// Stored positions in `index` (for its size, counted against the memory budget).
    positions: usize,
    index: HashMap<OwnedRow, Vec<(usize, usize)>>,
    /// Semi joins, kept side: which stored rows were emitted; outer sides: which matched.
    emitted: Vec<Vec<bool>>,
    /// When each stored batch arrived (for the state TTL).
    born: Vec<u64>,
    /// `(time column, offset)`: a row goes once `time + offset <= watermark`.
    expiry: Option<(usize, i64)>,
    /// The latest time of each stored batch (in milliseconds), when rows expire.
    latest: Vec<i64>,
    /// The earliest of `latest` among the stored batches (nothing expires before it).
    first: i64,
    /// How the stored batches are snapshotted (see [`snapshot`]).
    epochs: Epochs,
}

impl Side {
    /// Stores `batch`; returns, per row, its key (`None` when a key column is NULL).
    fn store(&mut self, batch: RecordBatch) -> Result<Vec<Option<OwnedRow>>> {
        let columns: Vec<ArrayRef> = self.keys.iter().map(|k| batch.column(*k).clone()).collect();
        let rows = self.converter.convert_columns(&columns)?;
        let b = self.stored.len();
        let mut keys = Vec::with_capacity(batch.num_rows());
        for i in 0..batch.num_rows() {
            if columns.iter().any(|c| c.is_null(i)) {
                keys.push(None);
                continue;
            }
            let key = rows.row(i).owned();
            self.index.entry(key.clone()).or_default().push((b, i));
            keys.push(Some(key));
            self.positions += 1;
        }
        self.emitted.push(vec![false; batch.num_rows()]);
        self.born.push(now_ms());
        if let Some((c, _)) = self.expiry {
            let ms = weir_sql::group_windows::epoch_millis(batch.column(c))?;
            let latest = arrow::compute::max(&ms).unwrap_or(i64::MIN);
            self.latest.push(latest);
            self.first = self.first.min(latest);
        }
        self.stored.push(batch)?;
        self.stored.set_overhead(self.overhead())?;
        Ok(keys)
    }

    /// Flags stored row `at` (a kept row emitted, an outer row matched); false when it was
    /// flagged already. Its epoch is encoded again at the next snapshot.
    fn flag(&mut self, at: (usize, usize)) -> bool {
        let flag = &mut self.emitted[at.0][at.1];
        if *flag {
            return false;
        }
        *flag = true;
        self.epochs.touch(at.0);
        true
    }

    /// About what the index takes in memory: a key with its list (arrow's `OwnedRow`, a
    /// vector and the hash table's slot, about 96 bytes with the key's own), and 16 bytes
    /// per stored position, with the vectors' usual slack.
    fn index_bytes(&self) -> u64 {
        (self.index.capacity() * 96 + self.positions * 24) as u64
    }

    /// What the side holds in memory beside its stored batches: the index, and the
    /// encoded parts waiting for their checkpoint ([`snapshot::Epochs::held`]).
    fn overhead(&self) -> u64 {
        self.index_bytes() + self.epochs.held()
    }

    /// Takes back one stored row equal to `row` under `key`: its position, or `None` when
    /// no such row is stored.
    fn remove(
        &mut self,
        key: &OwnedRow,
        row: arrow::row::Row<'_>,
    ) -> Result<Option<(usize, usize)>> {
        let Some(candidates) = self.index.get(key) else {
            return Ok(None);
        };
        let mut found = None;
        for (k, (b, i)) in candidates.iter().enumerate() {
            let stored = self
                .full
                .convert_columns(self.stored.get(*b)?.slice(*i, 1).columns())?;
            if stored.row(0) == row {
                found = Some(k);
                break;
            }
        }
        let Some(k) = found else {
            return Ok(None);
        };
        let rows = self.index.get_mut(key).expect("looked up");
        let at = rows.swap_remove(k);
        self.positions -= 1;
        if rows.is_empty() {
            self.index.remove(key);
        }
        self.dead.insert(at);
        self.epochs.touch(at.0);
        Ok(Some(at))
    }

    /// Rebuilds the stored rows without the dead ones once those are the majority.
    fn compact(&mut self, schema: &SchemaRef) -> Result<()> {
        let stored: usize = (0..self.stored.len()).map(|b| self.stored.rows(b)).sum();
        if self.dead.len() < 1024 || self.dead.len() * 2 < stored {
            return Ok(());
        }
        let mut live = Vec::with_capacity(self.stored.len());
        // Live rows keep their match counts at their new positions.
        let (mut matches, mut at) = (HashMap::new(), 0);
        for b in 0..self.stored.len() {
            let batch = self.stored.get(b)?;
            let keep: arrow::array::BooleanArray = (0..batch.num_rows())
                .map(|i| {
                    let live = !self.dead.contains(&(b, i));
                    if live {
                        if let Some(c) = self.matches.get(&(b, i)) {
                            matches.insert((0, at), *c);
                        }
                        at += 1;
                    }
                    Some(live)
                })
                .collect();
            live.push(arrow::compute::filter_record_batch(&batch, &keep)?);
        }
        let live = arrow::compute::concat_batches(schema, &live)?;
        let born = self.born.iter().copied().max().unwrap_or_else(now_ms);
        self.clear();
        self.store(live)?;
        self.born[0] = born;
        self.matches = matches;
        Ok(())
    }

    /// Forgets every stored row (with their flags, counts and epochs).
    fn clear(&mut self) {
        self.stored.clear();
        self.index.clear();
        self.positions = 0;
        self.emitted.clear();
        self.born.clear();
        self.latest.clear();
        self.dead.clear();
        self.matches.clear();
        self.first = i64::MAX;
        self.epochs.reset();
    }

    /// Drops the batches stored before `cutoff` (state TTL).
    fn expire(&mut self, cutoff: u64) {
        let born = std::mem::take(&mut self.born);
        self.drop_batches(|b| born[b] < cutoff);
        self.born = born;
    }

    /// Drops the batches whose rows have all expired at `watermark`.
    fn close(&mut self, watermark: i64) {
        let Some((_, offset)) = self.expiry else {
            return;
        };
        if self.first.saturating_add(offset) > watermark {
            return;
        }
        let latest = std::mem::take(&mut self.latest);
        self.drop_batches(|b| latest[b].saturating_add(offset) <= watermark);
        self.first = (0..self.stored.len())
            .filter(|b| self.stored.rows(*b) > 0)
            .map(|b| latest[b])
            .min()
            .unwrap_or(i64::MAX);
        self.latest = latest;
    }

    /// Drops the stored batches `gone` selects (their slots stay, empty, so positions in
    /// the index keep their meaning).
    fn drop_batches(&mut self, gone: impl Fn(usize) -> bool) {
        let expired: Vec<usize> = (0..self.stored.len())
            .filter(|b| self.stored.rows(*b) > 0 && gone(*b))
            .collect();
        if expired.is_empty() {
            return;
        }
        for b in &expired {
            self.stored.drop_batch(*b);
            self.emitted[*b] = Vec::new();
            self.epochs.touch(*b);
        }
        self.dead.retain(|(b, _)| !expired.contains(b));
        self.matches.retain(|(b, _), _| !expired.contains(b));
        let empty = |b: usize| self.stored.rows(b) == 0;
        self.index.retain(|_, rows| {
            rows.retain(|(b, _)| !empty(*b));
            !rows.is_empty()
        });
        self.positions = self.index.values().map(Vec::len).sum();
    }
}

struct JoinOperator {
    kind: JoinKind,
    sides: [Side; 2],
    inputs: [SchemaRef; 2],
    filter: Option<PhysicalExprRef>,
    /// Left columns then right columns, all nullable: what the filter reads.
    combined: SchemaRef,
    schema: SchemaRef,
    ttl: Option<Ttl>,
    max_parallelism: usize,
    /// The key groups this subtask owns.
    key_groups: std::ops::Range<usize>,
    /// Inner join with a changelog input (see the module docs).
    updating: bool,
    /// Null-aware anti join (`NOT IN`): rows seen on the right, and those with a NULL key.
    null_aware: bool,
    right_rows: u64,
    right_nulls: u64,
    /// Checkpoints are incremental: encoded parts of completed checkpoints leave the disk.
    incremental: bool,
}

impl JoinOperator {
    /// Whether `side`'s rows appear padded with NULLs when they have no match.
    fn outer(&self, side: usize) -> bool {
        match self.kind {
            JoinKind::LeftOuter => side == 0,
            JoinKind::RightOuter => side == 1,
            JoinKind::FullOuter => true,
            _ => false,
        }
    }

    /// Whether `side`'s stored rows carry state of their own (see [`flagged`]).
    fn flagged(&self, side: usize) -> bool {
        flagged(self.kind, side)
    }

    /// Inner and outer joins when an input updates: retractions take stored rows back. A
    /// batch is applied as retractions of stored rows, then its new rows, then the
    /// retractions of rows that only this batch added (rows are equal by content, so this
    /// order gives the same multiset as applying the rows one by one). A stored row of an
    /// outer side counts its matches: its NULL-padded row is out while the count is zero.
    fn changelog_join(&mut self, this: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        let other = 1 - this;
        let (outer_this, outer_other) = (self.outer(this), self.outer(other));
        // Semi and anti joins: (kept side, anti).
        let filtering = match self.kind {
            JoinKind::LeftSemi => Some((0, false)),
            JoinKind::RightSemi => Some((1, false)),
            JoinKind::LeftAnti => Some((0, true)),
            JoinKind::RightAnti => Some((1, true)),
            _ => None,
        };
        // Sides whose stored rows keep match counts.
        let (counted_this, counted_other) = (self.flagged(this), self.flagged(other));
        let (data, ops) = changelog::split(&batch);
        let kinds: Vec<RowKind> = (0..data.num_rows())
            .map(|i| changelog::kind_at(ops.as_ref(), i))
            .collect();
        let side = &self.sides[this];
        let key_columns: Vec<ArrayRef> =
            side.keys.iter().map(|k| data.column(*k).clone()).collect();
        let key_rows = side.converter.convert_columns(&key_columns)?;
        let full_rows = side.full.convert_columns(data.columns())?;
        let key =
            |i: usize| (!key_columns.iter().any(|c| c.is_null(i))).then(|| key_rows.row(i).owned());
        // Rows of `data` that change the join, with their stored position, in output
        // order; rows with a NULL key match nothing and are not stored.
        let mut changed: Vec<(usize, Option<(usize, usize)>)> = Vec::new();
        let mut deferred = Vec::new();
        for i in (0..data.num_rows()).filter(|i| kinds[*i].is_retraction()) {
            let Some(k) = key(i) else {
                changed.push((i, None));
                continue;
            };
            match self.sides[this].remove(&k, full_rows.row(i))? {
                Some(at) => changed.push((i, Some(at))),
                None => deferred.push((i, k)),
            }
        }
        let (added, unkeyed): (Vec<u32>, Vec<u32>) = (0..data.num_rows() as u32)
            .filter(|i| !kinds[*i as usize].is_retraction())
            .partition(|i| key(*i as usize).is_some());
        changed.extend(unkeyed.iter().map(|i| (*i as usize, None)));
        if !added.is_empty() {
            let b = self.sides[this].stored.len();
            let rows = arrow::compute::take_record_batch(
                &data,
                &arrow::array::UInt32Array::from(added.clone()),
            )?;
            self.sides[this].store(rows)?;
            changed.extend(
                added
                    .iter()
                    .enumerate()
                    .map(|(j, i)| (*i as usize, Some((b, j)))),
            );
        }
        for (i, k) in deferred {
            // A retraction of a row never stored (expired by the TTL) changes nothing.
            if let Some(at) = self.sides[this].remove(&k, full_rows.row(i))? {
                changed.push((i, Some(at)));
            }
        }
        // Candidate pairs (index into `changed`, stored row of the other side), checked
        // against the extra condition.
        let mut pairs: Vec<(usize, (usize, usize))> = Vec::new();
        for (c, (i, _)) in changed.iter().enumerate() {
            if let Some(matches) = key(*i).and_then(|k| self.sides[other].index.get(&k)) {
                pairs.extend(matches.iter().map(|m| (c, *m)));
            }
        }
        if let (Some(filter), false) = (&self.filter, pairs.is_empty()) {
            let own: Vec<Option<u32>> = pairs
                .iter()
                .map(|(c, _)| Some(changed[*c].0 as u32))
                .collect();
            let theirs: Vec<Option<(usize, usize)>> = pairs.iter().map(|(_, m)| Some(*m)).collect();
            let joined = self.assemble(this, &data, &own, &theirs)?;
            let mask = filter.evaluate(&joined)?.into_array(joined.num_rows())?;
            let mask = mask.as_boolean();
            let mut p = 0;
            pairs.retain(|_| {
                p += 1;
                mask.is_valid(p - 1) && mask.value(p - 1)
            });
        }
        // The output, row by row: (row of `data` or none, stored row of the other side or
        // none, kind).
        let (mut own, mut theirs, mut out_kinds) = (Vec::new(), Vec::new(), Vec::new());
        let mut next = 0;
        for (c, (i, at)) in changed.iter().enumerate() {
            let kind = kinds[*i];
            let start = next;
            while next < pairs.len() && pairs[next].0 == c {
                next += 1;
            }
            let matches = &pairs[start..next];
            // How many rows of the other side match row `i` (for a retraction: matched it).
            let count_here = match at {
                Some(at) if kind.is_retraction() => {
                    self.sides[this].matches.remove(at).unwrap_or(0) as usize
                }
                _ => matches.len(),
            };
            if let Some((kept, anti)) = filtering {
                // Semi and anti joins output kept rows only: a semi join shows a kept row
                // while it has matches, an anti join while it has none.
                if this == kept {
                    if (count_here > 0) != anti {
                        own.push(Some(*i as u32));
                        theirs.push(None);
                        out_kinds.push(kind);
                    }
                } else {
                    for (_, m) in matches {
                        let count = self.sides[other].matches.entry(*m).or_insert(0);
                        let before = *count;
                        if kind.is_retraction() {
                            *count = count.saturating_sub(1);
                        } else {
                            *count += 1;
                        }
                        let after = *count;
                        if after == 0 {
                            self.sides[other].matches.remove(m);
                        }
                        if (before == 0) != (after == 0) {
                            let shown = (after > 0) != anti;
                            own.push(None);
                            theirs.push(Some(*m));
                            out_kinds.push(if shown {
                                RowKind::Insert
                            } else {
                                RowKind::Delete
                            });
                        }
                    }
                }
                if let (Some(at), false) = (at, kind.is_retraction())
                    && this == kept
                    && !matches.is_empty()
                {
                    self.sides[this].matches.insert(*at, matches.len() as u32);
                }
                continue;
            }
            let lonely = count_here == 0;
            if outer_this && lonely {
                own.push(Some(*i as u32));
                theirs.push(None);
                out_kinds.push(kind);
            }
            for (_, m) in matches {
                let count = self.sides[other].matches.entry(*m).or_insert(0);
                if kind.is_retraction() {
                    own.push(Some(*i as u32));
                    theirs.push(Some(*m));
                    out_kinds.push(kind);
                    *count = count.saturating_sub(1);
                    if *count == 0 {
                        self.sides[other].matches.remove(m);
                        if outer_other {
                            // Its last match left: the padded row is back.
                            own.push(None);
                            theirs.push(Some(*m));
                            out_kinds.push(RowKind::Insert);
                        }
                    }
                } else {
                    *count += 1;
                    if *count == 1 && outer_other {
                        // Its first match: the padded row goes.
                        own.push(None);
                        theirs.push(Some(*m));
                        out_kinds.push(RowKind::Delete);
                    }
                    own.push(Some(*i as u32));
                    theirs.push(Some(*m));
                    out_kinds.push(kind);
                }
            }
            if let (Some(at), false) = (at, kind.is_retraction())
                && !matches.is_empty()
            {
                self.sides[this].matches.insert(*at, matches.len() as u32);
            }
        }
        if counted_other {
            // The matched rows' counts changed: their epochs are encoded again.
            for (_, m) in &pairs {
                self.sides[other].epochs.touch(m.0);
            }
        } else {
            // Match counts only matter for outer and kept sides.
            self.sides[other].matches.clear();
        }
        if !counted_this {
            self.sides[this].matches.clear();
        }
        self.sides[this].compact(&self.inputs[this])?;
        if own.is_empty() {
            return Ok(());
        }
        let mut joined = self.assemble(this, &data, &own, &theirs)?;
        if let Some((kept, _)) = filtering {
            let n = self.inputs[0].fields().len();
            let columns: Vec<usize> = match kept {
                0 => (0..n).collect(),
                _ => (n..joined.num_columns()).collect(),
            };
            joined = joined.project(&columns)?;
        }
        let joined =
            RecordBatch::try_new(self.schema.clone(), joined.columns().to_vec()).unwrap_or(joined);
        let kinds: arrow::array::Int8Array = out_kinds.iter().map(|k| Some(*k as i8)).collect();
        out.emit(changelog::attach(&joined, Arc::new(kinds))?);
        Ok(())
    }

    /// Joined rows in the combined schema: `this` side's columns from rows of `data`, the
    /// other side's from its stored rows; `None` gives NULLs.
    fn assemble(
        &self,
        this: usize,
        data: &RecordBatch,
        own: &[Option<u32>],
        theirs: &[Option<(usize, usize)>],
    ) -> Result<RecordBatch> {
        let other = 1 - this;
        let own = arrow::array::UInt32Array::from(own.to_vec());
        let mut columns = Vec::with_capacity(self.combined.fields().len());
        for side in [0, 1] {
            if side == this {
                for c in 0..self.inputs[side].fields().len() {
                    columns.push(arrow::compute::take(data.column(c), &own, None)?);
                }
            } else {
                columns.extend(self.sides[other].stored.gather_or_null(theirs)?);
            }
        }
        let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(own.len()));
        Ok(RecordBatch::try_new_with_options(
            self.combined.clone(),
            columns,
            &options,
        )?)
    }

    /// Joined rows in the output's columns, all nullable: the left columns of `left`'s
    /// stored rows (NULLs when `None`), then the right columns of `right`'s.
    fn rows(
        &self,
        left: Option<&[(usize, usize)]>,
        right: Option<&[(usize, usize)]>,
        len: usize,
    ) -> Result<RecordBatch> {
        let mut columns = Vec::with_capacity(self.combined.fields().len());
        for (side, picks) in [(0, left), (1, right)] {
            match picks {
                Some(picks) => columns.extend(self.sides[side].stored.gather(picks)?),
                None => columns.extend(
                    self.inputs[side]
                        .fields()
                        .iter()
                        .map(|f| arrow::array::new_null_array(f.data_type(), len)),
                ),
            }
        }
        let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(len));
        Ok(RecordBatch::try_new_with_options(
            self.combined.clone(),
            columns,
            &options,
        )?)
    }

    /// Semi join: emit kept-side rows the first time they have a match.
    fn semi(&mut self, this: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        let kept = if matches!(self.kind, JoinKind::LeftSemi | JoinKind::LeftAnti) {
            0
        } else {
            1
        };
        let anti = matches!(self.kind, JoinKind::LeftAnti | JoinKind::RightAnti);
        let other = 1 - this;
        let stored = self.sides[this].stored.len();
        let keys = self.sides[this].store(batch)?;
        let mut picks = Vec::new();
        if self.null_aware {
            // `k NOT IN (right)`: true when the right is empty; otherwise unknown (so not
            // kept) for a NULL `k` or when the right holds a NULL. Blocked kept rows are
            // flagged as matched: they are never emitted, and emitted ones are retracted.
            let before = (self.right_rows, self.right_nulls);
            if this != kept {
                self.right_rows += keys.len() as u64;
                self.right_nulls += keys.iter().filter(|k| k.is_none()).count() as u64;
                let all = before.1 == 0 && self.right_nulls > 0;
                let null_keys = before.0 == 0 && self.right_rows > 0;
                if all || null_keys {
                    let side = &mut self.sides[kept];
                    for b in 0..side.stored.len() {
                        let batch = side.stored.get(b)?;
                        for r in 0..batch.num_rows() {
                            let null = side.keys.iter().any(|k| batch.column(*k).is_null(r));
                            if (all || null) && side.flag((b, r)) {
                                picks.push((b, r));
                            }
                        }
                    }
                }
            } else if self.right_rows > 0 {
                for (i, key) in keys.iter().enumerate() {
                    if key.is_none() || self.right_nulls > 0 {
                        self.sides[kept].flag((stored, i));
                    }
                }
            }
        }
        // With an extra condition, candidate pairs (kept row, other row) are checked.
        let mut pairs: [Vec<(usize, usize)>; 2] = [Vec::new(), Vec::new()];
        for (i, key) in keys.iter().enumerate() {
            let Some(key) = key else { continue };
            if this == kept {
                if let Some(rows) = self.sides[other].index.get(key) {
                    if self.filter.is_none() {
                        picks.push((stored, i));
                    } else {
                        for m in rows {
                            pairs[this].push((stored, i));
                            pairs[other].push(*m);
                        }
                    }
                }
            } else if let Some(rows) = self.sides[kept].index.get(key) {
                for m in rows {
                    if self.sides[kept].emitted[m.0][m.1] {
                        continue;
                    }
                    if self.filter.is_none() {
                        picks.push(*m);
                    } else {
                        pairs[kept].push(*m);
                        pairs[this].push((stored, i));
                    }
                }
            }
        }
        if let (Some(filter), false) = (&self.filter, pairs[0].is_empty()) {
            let mut columns = Vec::new();
            for (side, pairs) in pairs.iter().enumerate() {
                columns.extend(self.sides[side].stored.gather(pairs)?);
            }
            let options =
                arrow::array::RecordBatchOptions::new().with_row_count(Some(pairs[0].len()));
            let joined =
                RecordBatch::try_new_with_options(self.combined.clone(), columns, &options)?;
            let mask = filter.evaluate(&joined)?.into_array(joined.num_rows())?;
            let mask = mask.as_boolean();
            for (p, pick) in pairs[kept].iter().enumerate() {
                if mask.is_valid(p) && mask.value(p) {
                    picks.push(*pick);
                }
            }
        }
        picks.sort_unstable();
        picks.dedup();
        // `picks`: kept rows that now have a match for the first time (flagged).
        for pick in &picks {
            self.sides[kept].flag(*pick);
        }
        let (rows, kind) = if !anti {
            (picks, None)
        } else if this == kept {
            // Anti join: the new kept rows without a match are emitted...
            let n = self.sides[kept].stored.rows(stored);
            let lonely = (0..n)
                .filter(|i| !self.sides[kept].emitted[stored][*i])
                .map(|i| (stored, i))
                .collect();
            (lonely, Some(RowKind::Insert))
        } else {
            // ...and retracted when their first match arrives.
            (picks, Some(RowKind::Delete))
        };
        if rows.is_empty() {
            return Ok(());
        }
        let columns = self.sides[kept].stored.gather(&rows)?;
        let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
        out.emit(match kind {
            None => batch,
            Some(kind) => changelog::attach(&batch, changelog::kinds(kind, rows.len()))?,
        });
        Ok(())
    }
}

#[async_trait]
impl Operator for JoinOperator {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        self.restore(restored.unwrap_or_default())
    }

    async fn process_batch(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()> {
        if let Some(cutoff) = self.ttl.as_mut().and_then(|t| t.due(now_ms())) {
            for side in &mut self.sides {
                side.expire(cutoff);
            }
        }
        if self.updating {
            return self.changelog_join(input.min(1), batch, out);
        }
        if matches!(
            self.kind,
            JoinKind::LeftSemi | JoinKind::RightSemi | JoinKind::LeftAnti | JoinKind::RightAnti
        ) {
            return self.semi(input.min(1), batch, out);
        }
        let (this, other) = (input.min(1), 1 - input.min(1));
        let stored = self.sides[this].stored.len();
        let rows = batch.num_rows();
        let keys = self.sides[this].store(batch)?;
        // Pairs (row of this batch, stored row of the other side).
        let (mut mine, mut theirs) = (Vec::new(), Vec::new());
        for (i, key) in keys.iter().enumerate() {
            let Some(key) = key else { continue };
            if let Some(matches) = self.sides[other].index.get(key) {
                for m in matches {
                    mine.push((stored, i));
                    theirs.push(*m);
                }
            }
        }
        let (left, right) = if this == 0 {
            (&mine, &theirs)
        } else {
            (&theirs, &mine)
        };
        let mut joined = self.rows(Some(left), Some(right), left.len())?;
        if let (Some(filter), true) = (&self.filter, joined.num_rows() > 0) {
            let mask = filter.evaluate(&joined)?.into_array(joined.num_rows())?;
            let mask = mask.as_boolean();
            let passed = |p: usize| mask.is_valid(p) && mask.value(p);
            mine = (0..mine.len())
                .filter(|p| passed(*p))
                .map(|p| mine[p])
                .collect();
            theirs = (0..theirs.len())
                .filter(|p| passed(*p))
                .map(|p| theirs[p])
                .collect();
            joined = arrow::compute::filter_record_batch(&joined, mask)?;
        }
        if self.kind == JoinKind::Inner {
            if joined.num_rows() > 0 {
                let joined = RecordBatch::try_new(self.schema.clone(), joined.columns().to_vec())
                    .unwrap_or(joined);
                out.emit(joined);
            }
            return Ok(());
        }
        // Outer joins: a row of an outer side without a match is emitted padded with
        // NULLs; when its first match arrives, that padded row is retracted.
        let outer = |side: usize| match self.kind {
            JoinKind::LeftOuter => side == 0,
            JoinKind::RightOuter => side == 1,
            _ => true,
        };
        let mut retract = Vec::new();
        if outer(other) {
            for o in &theirs {
                if self.sides[other].flag(*o) {
                    retract.push(*o);
                }
            }
            retract.sort_unstable();
            retract.dedup();
        }
        let mut lonely = Vec::new();
        if outer(this) {
            for at in &mine {
                self.sides[this].flag(*at);
            }
            lonely = (0..rows)
                .filter(|i| !self.sides[this].emitted[stored][*i])
                .map(|i| (stored, i))
                .collect();
        }
        let padded = |side: usize, picks: &[(usize, usize)]| {
            if side == 0 {
                self.rows(Some(picks), None, picks.len())
            } else {
                self.rows(None, Some(picks), picks.len())
            }
        };
        let parts = [
            (padded(other, &retract)?, RowKind::Delete),
            (joined, RowKind::Insert),
            (padded(this, &lonely)?, RowKind::Insert),
        ];
        let mut batches = Vec::new();
        for (part, kind) in parts {
            if part.num_rows() > 0 {
                let ops = changelog::kinds(kind, part.num_rows());
                batches.push(changelog::attach(&part, ops)?);
            }
        }
        if let Some(first) = batches.first() {
            out.emit(arrow::compute::concat_batches(&first.schema(), &batches)?);
        }
        Ok(())
    }

    /// Every input has ended (drained: a stop without drain does not finish operators),
    /// so no row can meet the stored ones any more. As in Flink, a finished operator
    /// keeps no state: the stored rows (and their files on disk) go now, and the final
    /// checkpoint does not write them.
    async fn finish(&mut self, _out: &mut Output) -> Result<()> {
        for side in &mut self.sides {
            side.clear();
        }
        (self.right_rows, self.right_nulls) = (0, 0);
        Ok(())
    }

    async fn process_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        for side in &mut self.sides {
            side.close(watermark);
        }
        out.emit_watermark(watermark);
        Ok(())
    }

    fn state_bytes(&self) -> usize {
        self.sides
            .iter()
            .map(|side| {
                let (memory, disk) = side.stored.bytes();
                (memory + disk) as usize
                    + side
                        .index
                        .iter()
                        .map(|(k, rows)| k.row().as_ref().len() + 16 * rows.len())
                        .sum::<usize>()
            })
            .sum()
    }

    fn snapshot_state(&mut self, checkpoint: CheckpointId) -> Result<OperatorState> {
        self.snapshot(checkpoint)
    }

    async fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        if self.incremental {
            for side in &mut self.sides {
                side.epochs.completed(checkpoint);
                side.stored.set_overhead(side.overhead())?;
            }
        }
        Ok(())
    }
}
