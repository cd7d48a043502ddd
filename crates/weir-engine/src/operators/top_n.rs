//! `TopN`: `ROW_NUMBER() OVER (PARTITION BY p ORDER BY o) <= n`, which is also
//! deduplication when `n` is 1 (keep first row for `ORDER BY ts ASC`, last row for `DESC`).
//!
//! Over an append-only input a partition keeps only its best `n` rows. Over an updating
//! input (a changelog, e.g. the counts of a `GROUP BY`) it keeps every row, as Flink's
//! retractable Top-N: a retracted row (`-U`/`-D`) is removed, and a row from below the top
//! moves up when a top row leaves.
//!
//! Input arrives hash-partitioned by the partition columns. Each partition keeps its best
//! `n` rows in order (ties keep arrival order: a newcomer ranks after equal rows, except
//! when deduplicating on `ORDER BY time DESC`, where the newer row replaces the kept one). After
//! each batch, every partition it changed emits the difference as a changelog: with the
//! row number in the output, the rows whose rank changed (`-U` old, `+U` new, `+I`/`-D`
//! when the list grows or shrinks); without it, only rows that entered or left the top.
//! State is keyed and snapshotted per key group as rows of the input schema, a snapshot
//! writing only the partitions changed since the previous one (`operators::delta`): a
//! restore takes each partition's rows from the last part that holds it. Snapshots name
//! partitions by their key hash ([`weir_state::key`], 8 bytes each), and a part holds
//! the rows of every partition of its hashes.
//!
//! Under a memory budget (`taskmanager.memory.managed.size`), the least recently used
//! partitions move to local disk while the job's keyed state is over it
//! ([`weir_state::cold`], by their key hash), and come back when a row reaches them.
//! Snapshots read them there. What the snapshots' bookkeeping holds in memory (each
//! part's hashes, the hashes changed since the last snapshot) counts in the budget too.

use super::delta::{DeltaSnapshots, HashDeltas};
use super::hot::ByHash;
use super::keys;
use super::state::{Ttl, item_batches, now_ms};
use arrow::array::{ArrayRef, Int8Array, RecordBatch};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{OwnedRow, RowConverter, Rows, SortField};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Arc;
use weir_common::changelog::{self, RowKind};
use weir_common::{CheckpointId, Error, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, StateDistribution, TaskInfo};
use weir_state::cold::{self, ColdEntries};
use weir_state::spill::StateMemory;

/// Creates Top-N operators.
pub struct TopNFactory {
    /// Partition columns of the input.
    pub partition: Vec<usize>,
    /// Sort columns of the input and their direction.
    pub order: Vec<(usize, SortOptions)>,
    /// How many rows each partition keeps.
    pub limit: usize,
    /// How many of the best rows of a partition are kept but not output (the output is
    /// ranks `offset + 1 ..= limit`).
    pub offset: usize,
    /// Whether the output has the row number as its last column.
    pub row_number: bool,
    /// Schema of the input.
    pub input_schema: SchemaRef,
    /// Output schema without the row-kind column.
    pub schema: SchemaRef,
    /// `table.exec.state.ttl`: partitions untouched this long are dropped.
    pub state_ttl: Option<std::time::Duration>,
    /// The input is a changelog: keep every row, take retracted rows back.
    pub retract: bool,
    /// Emit the change of every row (each version of a versioned view), not one per
    /// partition and batch.
    pub every_change: bool,
    /// The job's state budget: past it, cold partitions move to disk.
    pub state_memory: Option<Arc<StateMemory>>,
}

impl OperatorFactory for TopNFactory {
    fn name(&self) -> String {
        let names = |cols: &mut dyn Iterator<Item = usize>| -> String {
            cols.map(|c| self.input_schema.field(c).name().clone())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let order: Vec<String> = self
            .order
            .iter()
            .map(|(c, o)| {
                let dir = if o.descending { "DESC" } else { "ASC" };
                format!("{} {dir}", self.input_schema.field(*c).name())
            })
            .collect();
        let what = if self.limit == 1 {
            "Deduplicate"
        } else {
            "TopN"
        };
        format!(
            "{what}(partition: {}; order: {}; n: {}{})",
            names(&mut self.partition.iter().copied()),
            order.join(", "),
            self.limit,
            if self.retract { "; updating input" } else { "" }
        )
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let field = |c: usize| self.input_schema.field(c).data_type().clone();
        let order_fields = self
            .order
            .iter()
            .map(|(c, o)| SortField::new_with_options(field(*c), *o))
            .collect();
        let row_fields = (0..self.input_schema.fields().len())
            .map(|c| SortField::new(field(c)))
            .collect();
        Ok(Box::new(TopN {
            partition: self.partition.clone(),
            order: self.order.iter().map(|(c, _)| *c).collect(),
            limit: self.limit,
            offset: self.offset,
            retract: self.retract,
            every_change: self.every_change,
            replace_ties: !self.retract
                && self.limit == 1
                && matches!(self.order.as_slice(), [(c, o)] if o.descending
                    && matches!(field(*c), DataType::Timestamp(..))),
            row_number: self.row_number.then(|| {
                self.schema
                    .fields()
                    .last()
                    .expect("rank")
                    .data_type()
                    .clone()
            }),
            input_schema: self.input_schema.clone(),
            output: changelog::with_op_field(&keys::nullable(&self.schema)),
            partition_rows: keys::converter(&self.input_schema, &self.partition)?,
            order_rows: RowConverter::new(order_fields)?,
            full_rows: RowConverter::new(row_fields)?,
            tops: ByHash::default(),
            ttl: Ttl::new(self.state_ttl),
            next_id: 0,
            deltas: HashDeltas::new(
                DeltaSnapshots::new(task.max_parallelism, task.incremental_checkpoints)
                    .on_disk(self.state_memory.clone()),
            ),
            cold: ColdEntries::new(self.state_memory.clone()),
            hot_bytes: 0,
        }))
    }
}

#[derive(Clone)]
struct Entry {
    id: u64,
    sort: OwnedRow,
    row: OwnedRow,
}

struct TopN {
    partition: Vec<usize>,
    order: Vec<usize>,
    limit: usize,
    offset: usize,
    /// The input is a changelog (see the module docs).
    retract: bool,
    /// Deduplication keeping the last row by a time column (`ORDER BY ts DESC`, n = 1):
    /// as in Flink, a row with the same time replaces the kept one.
    replace_ties: bool,
    every_change: bool,
    /// The type of the row-number column, when the output has one.
    row_number: Option<DataType>,
    input_schema: SchemaRef,
    output: SchemaRef,
    partition_rows: RowConverter,
    order_rows: RowConverter,
    full_rows: RowConverter,
    /// The partitions in memory.
    tops: ByHash<Partition>,
    ttl: Option<Ttl>,
    next_id: u64,
    /// What earlier snapshots wrote, and the key hashes of the partitions whose stored
    /// rows changed since.
    deltas: HashDeltas,
    /// Partitions moved to disk (see the module docs).
    cold: ColdEntries,
    /// What the partitions in `tops` hold, as [`partition_bytes`] counts it.
    hot_bytes: u64,
}

/// A partition in memory: its best rows (all its rows when retracting), best first, and
/// when a row last reached it.
struct Partition {
    top: Vec<Entry>,
    touched: u64,
}

/// Memory of a partition besides its rows' bytes: its key's and list's headers, the map's
/// slack (about).
const PARTITION_OVERHEAD: usize = 96;
/// Memory of a stored row besides its bytes: the entry and its two rows' headers (about).
const ENTRY_OVERHEAD: usize = 96;

fn entry_bytes(e: &Entry) -> u64 {
    (ENTRY_OVERHEAD + e.row.row().as_ref().len() + e.sort.row().as_ref().len()) as u64
}

/// What partition `key` holding `top` takes in memory (about).
fn partition_bytes(key: &OwnedRow, top: &[Entry]) -> u64 {
    (PARTITION_OVERHEAD + key.row().as_ref().len()) as u64
        + top.iter().map(entry_bytes).sum::<u64>()
}

/// A partition's rows as bytes on disk: each row's id, sort key and row.
fn encode_top(top: &[Entry]) -> Vec<u8> {
    let capacity = top.iter().map(|e| entry_bytes(e) as usize).sum();
    encode_ranked(top.iter().map(|e| (e.id, &e.sort, &e.row)), capacity)
}

/// The rows [`encode_top`] wrote, with the converters that made their sort keys and rows.
fn decode_top(bytes: &[u8], order: &RowConverter, full: &RowConverter) -> Result<Vec<Entry>> {
    let rows = decode_ranked(bytes, order, full)?;
    Ok((rows.into_iter())
        .map(|(id, sort, row)| Entry { id, sort, row })
        .collect())
}

/// Ranked rows as the bytes of an entry on disk ([`weir_state::cold`]), for Top-N and the
/// final Top-N: each row's 64-bit tag (its arrival id, or its deadline), then its sort key
/// and the row in arrow's row format, each after its length. `capacity`: about the bytes.
pub(super) fn encode_ranked<'a>(
    rows: impl Iterator<Item = (u64, &'a OwnedRow, &'a OwnedRow)>,
    capacity: usize,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(capacity);
    for (tag, sort, row) in rows {
        out.extend_from_slice(&tag.to_le_bytes());
        for row in [sort, row] {
            let bytes = row.row();
            out.extend_from_slice(&(bytes.as_ref().len() as u32).to_le_bytes());
            out.extend_from_slice(bytes.as_ref());
        }
    }
    out
}

/// The rows [`encode_ranked`] wrote, with the converters that made their sort keys and
/// rows.
pub(super) fn decode_ranked(
    bytes: &[u8],
    order: &RowConverter,
    full: &RowConverter,
) -> Result<Vec<(u64, OwnedRow, OwnedRow)>> {
    let corrupt = || Error::internal("a Top-N partition read back from local disk is corrupt");
    let (order, full) = (order.parser(), full.parser());
    let mut rest = bytes;
    let mut rows = Vec::new();
    while !rest.is_empty() {
        let tag = next(&mut rest, 8).ok_or_else(corrupt)?;
        let tag = u64::from_le_bytes(tag.try_into().expect("8 bytes"));
        let mut read = |parser: &arrow::row::RowParser| -> Result<OwnedRow> {
            let len = next(&mut rest, 4).ok_or_else(corrupt)?;
            let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
            Ok(parser
                .parse(next(&mut rest, len).ok_or_else(corrupt)?)
                .owned())
        };
        let sort = read(&order)?;
        let row = read(&full)?;
        rows.push((tag, sort, row));
    }
    Ok(rows)
}

/// The first `n` bytes of `rest`, which moves past them.
fn next<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, tail) = rest.split_at_checked(n)?;
    *rest = tail;
    Some(head)
}

/// Output rows being collected: the input row, its rank (1-based) and kind.
#[derive(Default)]
struct Changes {
    rows: Vec<OwnedRow>,
    ranks: Vec<u64>,
    kinds: Vec<i8>,
}

impl Changes {
    /// `rank` counts from 0.
    fn push(&mut self, entry: &Entry, rank: usize, kind: RowKind) {
        self.rows.push(entry.row.clone());
        self.ranks.push(rank as u64 + 1);
        self.kinds.push(kind as i8);
    }
}

impl TopN {
    /// Partitions were dropped: the next snapshot writes every partition.
    fn start_over(&mut self) {
        self.deltas.start_over();
    }

    /// Partition `key`'s rows (its key hash `hash`), taken out of memory or off the disk.
    fn take_top(&mut self, key: &OwnedRow, hash: u64) -> Result<Option<Vec<Entry>>> {
        if let Some(p) = self.tops.remove(hash, key) {
            self.hot_bytes -= partition_bytes(key, &p.top);
            return Ok(Some(p.top));
        }
        let taken = self.cold.take(hash, key.row().as_ref())?;
        (taken.map(|(bytes, _)| decode_top(&bytes, &self.order_rows, &self.full_rows))).transpose()
    }

    /// Keeps partition `key` (its key hash `hash`) in memory, last used at `touched`.
    fn put_top(&mut self, key: OwnedRow, top: Vec<Entry>, touched: u64, hash: u64) {
        self.hot_bytes += partition_bytes(&key, &top);
        self.tops.insert(hash, key, Partition { top, touched });
    }

    /// While the job's state is over its budget, moves the least recently used
    /// partitions to disk.
    fn relieve(&mut self) -> Result<()> {
        let bookkeeping = self.deltas.bookkeeping();
        if !self.cold.set_hot(self.hot_bytes + bookkeeping) {
            return Ok(());
        }
        let moving = cold::least_recently_used(
            self.tops.iter().map(|(h, k, p)| ((h, k), p.touched)),
            |(h, k)| partition_bytes(k, &self.tops.get(*h, k).expect("a kept partition").top),
            self.hot_bytes,
            self.cold.hot_target().saturating_sub(bookkeeping),
        );
        let moving: Vec<(u64, OwnedRow, u64)> = (moving.into_iter())
            .map(|((hash, key), bytes)| (hash, key.clone(), bytes))
            .collect();
        for (hash, key, bytes) in moving {
            let p = self.tops.remove(hash, &key).expect("a kept partition");
            let (k, value) = (key.row(), encode_top(&p.top));
            if self.cold.put(hash, k.as_ref(), &value, p.touched)? {
                self.hot_bytes -= bytes;
            } else {
                self.tops.insert(hash, key, p);
            }
        }
        self.cold.set_hot(self.hot_bytes + bookkeeping);
        Ok(())
    }

    /// Every stored row of the partitions of key hashes `hashes`, in memory or
    /// on disk, each partition's rows together, best first.
    fn rows_of_hashes(&self, hashes: &[u64]) -> Result<RecordBatch> {
        let mut rows: Vec<arrow::row::Row<'_>> = Vec::new();
        let mut on_disk = Vec::new();
        for hash in hashes {
            for (_, p) in self.tops.of_hash(*hash) {
                rows.extend(p.top.iter().map(|e| e.row.row()));
            }
            if let Some((_, bytes)) = self.cold.get_by_hash(*hash)? {
                on_disk.extend(decode_top(&bytes, &self.order_rows, &self.full_rows)?);
            }
        }
        rows.extend(on_disk.iter().map(|e| e.row.row()));
        let columns = self.full_rows.convert_rows(rows)?;
        Ok(RecordBatch::try_new(
            keys::nullable(&self.input_schema),
            columns,
        )?)
    }

    /// A batch's partition keys, sort keys and rows in row format, and its partitions'
    /// key hashes by row.
    fn converted(&self, batch: &RecordBatch) -> Result<(Rows, Rows, Rows, Vec<u64>)> {
        let partition = keys::columns(batch, &self.partition);
        let order: Vec<ArrayRef> = self
            .order
            .iter()
            .map(|c| batch.column(*c).clone())
            .collect();
        Ok((
            self.partition_rows.convert_columns(&partition)?,
            self.order_rows.convert_columns(&order)?,
            self.full_rows.convert_columns(batch.columns())?,
            keys::hashes(batch, &self.partition)?,
        ))
    }

    /// Inserts one row into `top` (after its equals, or before them when
    /// `before_ties`), keeping only `limit` rows unless `keep_all`; false when it does not
    /// make the top.
    fn insert(
        top: &mut Vec<Entry>,
        limit: usize,
        before_ties: bool,
        keep_all: bool,
        entry: Entry,
    ) -> bool {
        let at =
            top.partition_point(|e| e.sort < entry.sort || (!before_ties && e.sort == entry.sort));
        if at >= limit && !keep_all {
            return false;
        }
        top.insert(at, entry);
        if !keep_all {
            top.truncate(limit);
        }
        at < limit
    }

    /// Removes one stored row equal to `row` (a retraction); true when it was in the top.
    /// A row that is not stored (expired by the state TTL) is ignored, as in Flink.
    fn remove(
        top: &mut Vec<Entry>,
        limit: usize,
        sort: arrow::row::Row<'_>,
        row: arrow::row::Row<'_>,
    ) -> bool {
        let from = top.partition_point(|e| e.sort.row() < sort);
        let found = top[from..]
            .iter()
            .take_while(|e| e.sort.row() == sort)
            .position(|e| e.row.row() == row);
        match found {
            Some(k) => {
                top.remove(from + k);
                from + k < limit
            }
            None => false,
        }
    }

    /// The changelog from `old` to `new` of one partition.
    /// The ranks of `top` the output shows (`offset + 1 ..= limit`).
    fn shown<'a>(&self, top: &'a [Entry]) -> &'a [Entry] {
        &top[self.offset.min(top.len())..top.len().min(self.limit)]
    }

    fn diff(&self, old: &[Entry], new: &[Entry], out: &mut Changes) {
        if self.row_number.is_some() {
            // Rank by rank: a row at a rank that changed is retracted and its successor
            // at that rank emitted.
            for shown in 0..old.len().max(new.len()) {
                let rank = self.offset + shown;
                match (old.get(shown), new.get(shown)) {
                    (Some(o), Some(n)) if o.id == n.id => {}
                    (Some(o), Some(n)) => {
                        out.push(o, rank, RowKind::UpdateBefore);
                        out.push(n, rank, RowKind::UpdateAfter);
                    }
                    (Some(o), None) => out.push(o, rank, RowKind::Delete),
                    (None, Some(n)) => out.push(n, rank, RowKind::Insert),
                    (None, None) => {}
                }
            }
            return;
        }
        let left: Vec<&Entry> = old
            .iter()
            .filter(|o| !new.iter().any(|n| n.id == o.id))
            .collect();
        let entered: Vec<&Entry> = new
            .iter()
            .filter(|n| !old.iter().any(|o| o.id == n.id))
            .collect();
        let paired = !left.is_empty() && !entered.is_empty();
        for (rank, o) in left.into_iter().enumerate() {
            let kind = if paired {
                RowKind::UpdateBefore
            } else {
                RowKind::Delete
            };
            out.push(o, rank, kind);
        }
        for (rank, n) in entered.into_iter().enumerate() {
            let kind = if paired {
                RowKind::UpdateAfter
            } else {
                RowKind::Insert
            };
            out.push(n, rank, kind);
        }
    }
}

#[async_trait]
impl Operator for TopN {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        // Each stored batch holds whole partitions, best row first; a partition in a
        // later batch (a later part of its key group) replaces its earlier rows.
        let Some(state) = restored else {
            return Ok(());
        };
        for item in &state.items {
            for batch in item_batches(&state, item)? {
                let (partition, order, full, hashes) = self.converted(&batch)?;
                let mut here: HashMap<OwnedRow, (Vec<Entry>, u64)> = HashMap::new();
                for (r, hash) in hashes.into_iter().enumerate() {
                    let entry = Entry {
                        id: self.next_id,
                        sort: order.row(r).owned(),
                        row: full.row(r).owned(),
                    };
                    self.next_id += 1;
                    let (top, _) = here
                        .entry(partition.row(r).owned())
                        .or_insert_with(|| (Vec::new(), hash));
                    top.push(entry);
                }
                let now = now_ms();
                for (key, (top, hash)) in here {
                    self.take_top(&key, hash)?;
                    self.put_top(key, top, now, hash);
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
        let (batch, ops) = changelog::split(&batch);
        if ops.is_some() && !self.retract {
            return Err(Error::internal("append-only Top-N received a changelog"));
        }
        let (partition, order, full, hashes) = self.converted(&batch)?;
        // Rows of each partition, in arrival order.
        let mut index: HashMap<arrow::row::Row<'_>, usize> = HashMap::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        for i in 0..batch.num_rows() {
            let slot = *index.entry(partition.row(i)).or_insert_with(|| {
                members.push(Vec::new());
                members.len() - 1
            });
            members[slot].push(i);
        }
        let now = now_ms();
        if let Some(cutoff) = self.ttl.as_mut().and_then(|t| t.due(now)) {
            let mut freed = 0;
            self.tops.retain(|key, p| {
                let keep = p.touched >= cutoff;
                if !keep {
                    freed += partition_bytes(key, &p.top);
                }
                keep
            });
            self.hot_bytes -= freed;
            if freed > 0 || self.cold.expire(cutoff)? > 0 {
                self.start_over();
            }
        }
        let mut changes = Changes::default();
        for rows in members {
            let key = partition.row(rows[0]).owned();
            let hash = hashes[rows[0]];
            let stored = self.take_top(&key, hash)?;
            let existed = stored.is_some();
            let mut top = stored.unwrap_or_default();
            let mut modified = false;
            let mut old: Vec<Entry> = (top.iter().take(self.limit).skip(self.offset))
                .cloned()
                .collect();
            let mut changed = false;
            for i in rows {
                let sort = order.row(i);
                let changed_now = if changelog::kind_at(ops.as_ref(), i).is_retraction() {
                    modified = true;
                    Self::remove(&mut top, self.limit, sort, full.row(i))
                } else {
                    let beaten = |l: &Entry| {
                        l.sort.row() < sort || (!self.replace_ties && l.sort.row() == sort)
                    };
                    if !self.retract && top.len() == self.limit && top.last().is_some_and(beaten) {
                        continue; // the common case: not good enough, nothing allocated
                    }
                    modified = true;
                    let entry = Entry {
                        id: self.next_id,
                        sort: sort.owned(),
                        row: full.row(i).owned(),
                    };
                    self.next_id += 1;
                    Self::insert(&mut top, self.limit, self.replace_ties, self.retract, entry)
                };
                if changed_now && self.every_change {
                    let shown = self.shown(&top);
                    self.diff(&old, shown, &mut changes);
                    old = shown.to_vec();
                } else {
                    changed |= changed_now;
                }
            }
            if changed {
                self.diff(&old, self.shown(&top), &mut changes);
            }
            if !top.is_empty() {
                if modified {
                    self.deltas.mark(hash);
                }
                self.put_top(key, top, now, hash);
            } else if existed {
                // A dropped partition is in no later part: the next snapshot is whole.
                self.start_over();
            }
        }
        self.relieve()?;
        if changes.rows.is_empty() {
            return Ok(());
        }
        let mut columns = self
            .full_rows
            .convert_rows(changes.rows.iter().map(|r| r.row()))?;
        if let Some(t) = &self.row_number {
            let ranks: ArrayRef = Arc::new(arrow::array::UInt64Array::from(changes.ranks));
            columns.push(arrow::compute::cast(&ranks, t)?);
        }
        columns.push(Arc::new(Int8Array::from(changes.kinds)));
        out.emit(RecordBatch::try_new(self.output.clone(), columns)?);
        Ok(())
    }

    fn state_bytes(&self) -> usize {
        (self.hot_bytes + self.cold.on_disk()) as usize + self.deltas.size()
    }

    fn snapshot_state(&mut self, checkpoint: CheckpointId) -> Result<OperatorState> {
        if self.tops.is_empty() && self.cold.is_empty() {
            self.start_over();
            return Ok(OperatorState::new(StateDistribution::KeyGroups, Vec::new()));
        }
        // (Out of `self` while it reads the rows.)
        let mut deltas = std::mem::take(&mut self.deltas);
        let hot = self.tops.iter().map(|(hash, _, _)| hash);
        let every = || hot.chain(self.cold.hashes()).collect();
        let state = deltas.snapshot(checkpoint, every, |h| self.rows_of_hashes(h));
        self.deltas = deltas;
        state
    }

    async fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.deltas.completed(checkpoint);
        Ok(())
    }
}

/// The ordering rule of the kept rows.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::state::rows_as_text;
    use arrow::array::Int64Array;
    use arrow::datatypes::{Field, Schema};
    use weir_runtime::TaskInfo;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
            Field::new("pad", DataType::Utf8, true),
        ]))
    }

    /// A Top-2 by `v DESC` per `k`.
    fn top_2(memory: Option<Arc<StateMemory>>) -> TopNFactory {
        TopNFactory {
            partition: vec![0],
            order: vec![(
                1,
                SortOptions {
                    descending: true,
                    nulls_first: false,
                },
            )],
            limit: 2,
            offset: 0,
            row_number: false,
            input_schema: schema(),
            schema: schema(),
            state_ttl: None,
            retract: false,
            every_change: false,
            state_memory: memory,
        }
    }

    /// Rows of keys `keys`, each `v + k % 3`, padded with 300 characters.
    fn batch(keys: impl Iterator<Item = i64>, v: i64) -> RecordBatch {
        let k: Vec<i64> = keys.collect();
        let vs: Vec<i64> = k.iter().map(|k| v + k % 3).collect();
        let pad: arrow::array::StringArray = k.iter().map(|k| Some(format!("{k:0>300}"))).collect();
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(k)),
                Arc::new(Int64Array::from(vs)),
                Arc::new(pad),
            ],
        )
        .unwrap()
    }

    fn incremental_task() -> TaskInfo {
        let mut task = crate::batch::task("top_n");
        task.incremental_checkpoints = true;
        task
    }

    /// Delta snapshots taken after changes to some partitions restore exactly the rows
    /// that a whole snapshot holds: a partition's later part replaces its earlier rows.
    #[tokio::test]
    async fn delta_snapshots_restore_what_a_whole_snapshot_holds() {
        let factory = top_2(None);
        let whole = crate::batch::task("top_n");
        let mut delta = factory.create(&incremental_task()).unwrap();
        let mut reference = factory.create(&whole).unwrap();
        delta.open(None).await.unwrap();
        reference.open(None).await.unwrap();
        // Many partitions, then a few of them change again and again.
        let rounds = [
            (0..2000, 10),
            (0..20, 20),
            (10..30, 30),
            (0..5, 40),
            (25..26, 50),
        ];
        let mut state = None;
        for (checkpoint, (keys, v)) in rounds.into_iter().enumerate() {
            let b = batch(keys, v);
            let mut out = Output::for_split(None);
            delta.process_batch(0, b.clone(), &mut out).await.unwrap();
            reference.process_batch(0, b, &mut out).await.unwrap();
            state = Some(
                delta
                    .snapshot_state(CheckpointId(checkpoint as u64 + 1))
                    .unwrap(),
            );
        }
        let state = state.unwrap();
        assert!(
            state.items.len() > 64,
            "changed partitions went into parts of their own: {} items",
            state.items.len()
        );
        let mut restored = factory.create(&whole).unwrap();
        restored.open(Some(state)).await.unwrap();
        assert_eq!(
            rows_as_text(restored.snapshot_state(CheckpointId(9)).unwrap()),
            rows_as_text(reference.snapshot_state(CheckpointId(9)).unwrap())
        );
    }

    /// The emitted rows, as text, in order.
    fn emitted(out: &mut Output) -> Vec<String> {
        out.take()
            .into_iter()
            .filter_map(|item| match item {
                weir_runtime::StreamItem::Batch(b) => Some(b),
                _ => None,
            })
            .map(|b| {
                arrow::util::pretty::pretty_format_batches(&[b])
                    .unwrap()
                    .to_string()
            })
            .collect()
    }

    /// Under a budget a small part of its state, a Top-N moves partitions to disk and
    /// back (every round reaches every partition, in another order), and emits,
    /// snapshots (delta and whole) and restores (under the budget too) exactly what it
    /// does in memory.
    #[tokio::test]
    async fn partitions_on_disk_change_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let budget = 512 << 10;
        let memory = StateMemory::new(budget, tmp.path().to_path_buf());
        let mut spilled = top_2(Some(memory.clone()))
            .create(&incremental_task())
            .unwrap();
        let mut reference = top_2(None).create(&incremental_task()).unwrap();
        spilled.open(None).await.unwrap();
        reference.open(None).await.unwrap();
        let mut states = (None, None);
        for round in 0..8i64 {
            let keys = (0..3000i64).map(|k| (k * 7 + round * 1001) % 3000);
            let b = batch(keys, 10 * (round % 3));
            let (mut a, mut b_out) = (Output::for_split(None), Output::for_split(None));
            spilled.process_batch(0, b.clone(), &mut a).await.unwrap();
            reference.process_batch(0, b, &mut b_out).await.unwrap();
            assert_eq!(emitted(&mut a), emitted(&mut b_out), "round {round}");
            assert!(memory.used() <= budget, "{} bytes in memory", memory.used());
            if round % 3 == 1 {
                let checkpoint = CheckpointId(round as u64);
                states = (
                    Some(spilled.snapshot_state(checkpoint).unwrap()),
                    Some(reference.snapshot_state(checkpoint).unwrap()),
                );
            }
        }
        assert!(
            reference.state_bytes() > 5 * budget as usize,
            "the state ({} bytes) is not 5 times the budget",
            reference.state_bytes()
        );
        let whole = crate::batch::task("top_n");
        let (spilled_state, reference_state) = (states.0.unwrap(), states.1.unwrap());
        assert_eq!(
            rows_as_text(spilled_state.clone()),
            rows_as_text(reference_state.clone())
        );
        // Restored under the budget, snapshotted whole: the partitions on disk are read.
        drop(spilled);
        let mut restored = top_2(Some(memory.clone())).create(&whole).unwrap();
        restored.open(Some(spilled_state)).await.unwrap();
        assert!(memory.used() <= budget);
        let mut expected = top_2(None).create(&whole).unwrap();
        expected.open(Some(reference_state)).await.unwrap();
        assert_eq!(
            rows_as_text(restored.snapshot_state(CheckpointId(9)).unwrap()),
            rows_as_text(expected.snapshot_state(CheckpointId(9)).unwrap())
        );
    }

    fn entry(id: u64, sort: &OwnedRow) -> Entry {
        Entry {
            id,
            sort: sort.clone(),
            row: sort.clone(),
        }
    }

    #[test]
    fn ties_keep_arrival_order_and_the_list_stays_bounded() {
        let conv = RowConverter::new(vec![SortField::new(DataType::Int64)]).unwrap();
        let rows = conv
            .convert_columns(&[Arc::new(arrow::array::Int64Array::from(vec![
                5, 3, 5, 1, 9,
            ]))])
            .unwrap();
        let mut top = Vec::new();
        for (i, r) in (0..5).map(|i| (i, rows.row(i).owned())) {
            TopN::insert(&mut top, 3, false, false, entry(i as u64, &r));
        }
        let ids: Vec<u64> = top.iter().map(|e| e.id).collect();
        assert_eq!(ids, vec![3, 1, 0], "1, 3, then the first 5");
        let mut last = Vec::new();
        for (i, r) in [(0, rows.row(0).owned()), (1, rows.row(2).owned())] {
            TopN::insert(&mut last, 1, true, false, entry(i, &r));
        }
        assert_eq!(
            last[0].id, 1,
            "keep-last deduplication: the later of equal rows wins"
        );
    }

    #[test]
    fn retracting_a_top_row_moves_the_next_one_up() {
        let conv = RowConverter::new(vec![SortField::new(DataType::Int64)]).unwrap();
        let rows = conv
            .convert_columns(&[Arc::new(arrow::array::Int64Array::from(vec![
                5, 3, 5, 1, 9,
            ]))])
            .unwrap();
        let mut all = Vec::new();
        let entered: Vec<bool> = (0..5)
            .map(|i| {
                TopN::insert(
                    &mut all,
                    2,
                    false,
                    true,
                    entry(i as u64, &rows.row(i).owned()),
                )
            })
            .collect();
        assert_eq!(entered, vec![true, true, false, true, false]);
        assert_eq!(all.len(), 5, "an updating Top-N keeps every row");
        // Rows 1 (value 1) and 3 (value 3) are the top two; take back the 3.
        assert!(TopN::remove(&mut all, 2, rows.row(1), rows.row(1)));
        let top: Vec<u64> = all.iter().take(2).map(|e| e.id).collect();
        assert_eq!(top, vec![3, 0], "the first 5 moved up");
        // A row below the top leaves without changing it; an unknown row is ignored.
        assert!(!TopN::remove(&mut all, 2, rows.row(4), rows.row(4)));
        assert!(!TopN::remove(&mut all, 2, rows.row(4), rows.row(4)));
        assert_eq!(all.len(), 3);
    }
}
