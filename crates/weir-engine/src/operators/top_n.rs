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
//! restore takes each partition's rows from the last part that holds it.

use super::delta::{DeltaSnapshots, row_key_hashes};
use super::keys;
use super::state::{Ttl, now_ms, restored_batches};
use arrow::array::{ArrayRef, Int8Array, RecordBatch};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{OwnedRow, RowConverter, Rows, SortField};
use async_trait::async_trait;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use weir_common::changelog::{self, RowKind};
use weir_common::{CheckpointId, Error, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, StateDistribution, TaskInfo};

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
            tops: HashMap::new(),
            ttl: Ttl::new(self.state_ttl),
            next_id: 0,
            delta: DeltaSnapshots::new(task.max_parallelism, task.incremental_checkpoints),
            changed: HashSet::new(),
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
    /// Each partition's best rows (all its rows when retracting), best first, and when a
    /// row last reached it.
    tops: HashMap<OwnedRow, (Vec<Entry>, u64)>,
    ttl: Option<Ttl>,
    next_id: u64,
    /// What earlier snapshots wrote, and the partitions whose stored rows changed since.
    delta: DeltaSnapshots<OwnedRow>,
    changed: HashSet<OwnedRow>,
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
        self.changed.clear();
        self.delta.start_over();
    }

    fn converted(&self, batch: &RecordBatch) -> Result<(Rows, Rows, Rows)> {
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
        for batch in restored_batches(restored)? {
            let (partition, order, full) = self.converted(&batch)?;
            let mut here: HashSet<OwnedRow> = HashSet::new();
            for r in 0..batch.num_rows() {
                let entry = Entry {
                    id: self.next_id,
                    sort: order.row(r).owned(),
                    row: full.row(r).owned(),
                };
                self.next_id += 1;
                let key = partition.row(r).owned();
                let top = self
                    .tops
                    .entry(key.clone())
                    .or_insert_with(|| (Vec::new(), now_ms()));
                if here.insert(key) {
                    top.0.clear();
                }
                top.0.push(entry);
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
        let (partition, order, full) = self.converted(&batch)?;
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
            let before = self.tops.len();
            self.tops.retain(|_, (_, touched)| *touched >= cutoff);
            if self.tops.len() < before {
                self.start_over();
            }
        }
        let mut changes = Changes::default();
        for rows in members {
            let key = partition.row(rows[0]).owned();
            let stored = self.tops.remove(&key).map(|t| t.0);
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
                    self.changed.insert(key.clone());
                }
                self.tops.insert(key, (top, now));
            } else if existed {
                // A dropped partition is in no later part: the next snapshot is whole.
                self.start_over();
            }
        }
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
        self.tops
            .iter()
            .map(|(k, (top, _))| {
                k.row().as_ref().len()
                    + top
                        .iter()
                        .map(|e| e.row.row().as_ref().len() + e.sort.row().as_ref().len())
                        .sum::<usize>()
            })
            .sum::<usize>()
            + self.delta.size(std::mem::size_of::<OwnedRow>() + 16)
    }

    fn snapshot_state(&mut self, checkpoint: CheckpointId) -> Result<OperatorState> {
        if self.tops.is_empty() {
            self.start_over();
            return Ok(OperatorState::new(StateDistribution::KeyGroups, Vec::new()));
        }
        let changed: Vec<OwnedRow> = match self.delta.whole() {
            true => {
                self.changed.clear();
                self.tops.keys().cloned().collect()
            }
            false => self.changed.drain().collect(),
        };
        let hashes_of =
            |keys: &[OwnedRow]| row_key_hashes(&self.partition_rows, keys, self.partition.len());
        let rows_of = |keys: &[OwnedRow]| -> Result<RecordBatch> {
            let rows = keys
                .iter()
                .filter_map(|k| self.tops.get(k))
                .flat_map(|(top, _)| top.iter().map(|e| e.row.row()));
            let columns = self.full_rows.convert_rows(rows)?;
            Ok(RecordBatch::try_new(
                keys::nullable(&self.input_schema),
                columns,
            )?)
        };
        self.delta.snapshot(checkpoint, changed, hashes_of, rows_of)
    }

    async fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.delta.completed(checkpoint);
        Ok(())
    }
}

/// The ordering rule of the kept rows.
#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::{Field, Int64Type, Schema};

    /// Every stored row of `state`, as text, sorted.
    fn rows_of(state: OperatorState) -> Vec<String> {
        let mut rows: Vec<String> = restored_batches(Some(state))
            .unwrap()
            .iter()
            .flat_map(|b| {
                let (k, v) = (
                    b.column(0).as_primitive::<Int64Type>(),
                    b.column(1).as_primitive::<Int64Type>(),
                );
                (0..b.num_rows()).map(move |r| format!("{},{}", k.value(r), v.value(r)))
            })
            .collect();
        rows.sort();
        rows
    }

    /// Delta snapshots taken after changes to some partitions restore exactly the rows
    /// that a whole snapshot holds: a partition's later part replaces its earlier rows.
    #[tokio::test]
    async fn delta_snapshots_restore_what_a_whole_snapshot_holds() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
        ]));
        let factory = TopNFactory {
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
            input_schema: schema.clone(),
            schema: schema.clone(),
            state_ttl: None,
            retract: false,
            every_change: false,
        };
        let mut incremental = crate::batch::task("top_n");
        incremental.incremental_checkpoints = true;
        let whole = crate::batch::task("top_n");
        let mut delta = factory.create(&incremental).unwrap();
        let mut reference = factory.create(&whole).unwrap();
        delta.open(None).await.unwrap();
        reference.open(None).await.unwrap();
        let batch = |keys: std::ops::Range<i64>, v: i64| {
            let k: Vec<i64> = keys.clone().collect();
            let vs: Vec<i64> = keys.map(|k| v + k % 3).collect();
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from(k)),
                    Arc::new(Int64Array::from(vs)),
                ],
            )
            .unwrap()
        };
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
            rows_of(restored.snapshot_state(CheckpointId(9)).unwrap()),
            rows_of(reference.snapshot_state(CheckpointId(9)).unwrap())
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
