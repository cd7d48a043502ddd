//! `FinalTopN`: a Top-N whose partitions become final at a point of event time, so that it
//! emits each partition's rows once, append-only, as Flink does for
//!
//! * **window Top-N and window deduplication** (`PARTITION BY window_start, window_end,
//!   …` over a window TVF or window aggregate): a window's rows are final when the
//!   watermark reaches its last instant (`window_end` − 1 ms); its best `n` rows are then
//!   emitted and the window forgotten;
//! * **keep-first deduplication on a rowtime** (`ORDER BY rowtime ASC`, `n` = 1): a key's
//!   first row is final when the watermark reaches its time; it is emitted once and the key
//!   remembered, so later rows of the key are dropped.
//!
//! A row whose partition is already final when it arrives (late, behind the watermark) is
//! dropped, as Flink drops late rows. State is keyed: the rows waiting in each partition,
//! and for deduplication the keys already emitted (as their emitted row, flagged).
//!
//! **State larger than memory**: while the job's keyed state is over its budget
//! (`taskmanager.memory.managed.size`), the waiting partitions that least recently had
//! rows move to local disk ([`weir_state::cold`]): each partition's rows (deadline, sort
//! key, row, in arrow's row format) as one entry. Their deadlines stay in memory, so a
//! watermark that makes such a partition final takes it back to emit it; a row of the
//! partition takes it back too. Snapshots read the partitions on disk a few megabytes at
//! a time. The keys already emitted stay in memory.

use super::keys;
use super::state::{item_batches, keyed_state, snapshot_entries};
use super::top_n::{decode_ranked, encode_ranked};
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{OwnedRow, RowConverter, SortField};
use async_trait::async_trait;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use weir_common::changelog;
use weir_common::{CheckpointId, Error, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, StateDistribution, TaskInfo};
use weir_sql::plan::FinalAt;
use weir_state::cold::{self, ColdEntries};
use weir_state::spill::StateMemory;

/// When a partition becomes final (the planner's rule, see [`FinalAt`]).
pub type Deadline = FinalAt;

/// Creates [`FinalTopN`] operators.
pub struct FinalTopNFactory {
    /// Partition columns of the input.
    pub partition: Vec<usize>,
    /// Sort columns of the input and their direction.
    pub order: Vec<(usize, SortOptions)>,
    /// How many rows each partition emits.
    pub limit: usize,
    /// Whether the output has the row number as its last column.
    pub row_number: bool,
    /// When a partition is final.
    pub deadline: Deadline,
    /// Schema of the input.
    pub input_schema: SchemaRef,
    /// Output schema (without a row-kind column: the output is append-only).
    pub schema: SchemaRef,
    /// The job's keyed state budget: past it, waiting partitions move to disk.
    pub state_memory: Option<Arc<StateMemory>>,
}

impl OperatorFactory for FinalTopNFactory {
    fn name(&self) -> String {
        let what = if self.deadline.once_per_key {
            "RowTimeDeduplicate(keep first"
        } else if self.limit == 1 {
            "WindowDeduplicate("
        } else {
            "WindowTopN("
        };
        let sep = if self.deadline.once_per_key { "; " } else { "" };
        format!(
            "{what}{sep}partition: {}; n: {}; at {})",
            keys::names(&self.input_schema, &self.partition),
            self.limit,
            self.input_schema.field(self.deadline.column).name()
        )
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let field = |c: usize| self.input_schema.field(c).data_type().clone();
        if !matches!(field(self.deadline.column), DataType::Timestamp(..)) {
            return Err(Error::internal("a final Top-N needs a timestamp deadline"));
        }
        Ok(Box::new(FinalTopN {
            partition: self.partition.clone(),
            order: self.order.iter().map(|(c, _)| *c).collect(),
            limit: self.limit,
            row_number: self.row_number.then(|| {
                self.schema
                    .fields()
                    .last()
                    .expect("rank")
                    .data_type()
                    .clone()
            }),
            deadline: self.deadline,
            input_schema: self.input_schema.clone(),
            output: self.schema.clone(),
            partition_rows: keys::converter(&self.input_schema, &self.partition)?,
            order_rows: RowConverter::new(
                self.order
                    .iter()
                    .map(|(c, o)| SortField::new_with_options(field(*c), *o))
                    .collect(),
            )?,
            full_rows: RowConverter::new(
                (0..self.input_schema.fields().len())
                    .map(|c| SortField::new(field(c)))
                    .collect(),
            )?,
            waiting: HashMap::new(),
            by_deadline: BTreeSet::new(),
            emitted: HashSet::new(),
            watermark: i64::MIN,
            max_parallelism: task.max_parallelism,
            hot_bytes: 0,
            cold: ColdEntries::new(self.state_memory.clone()),
            cold_timer_bytes: 0,
            memory: self.state_memory.clone(),
            batches: 0,
        }))
    }
}

/// A waiting row: its sort key, the row and its deadline (ms).
struct Waiting {
    sort: OwnedRow,
    row: OwnedRow,
    deadline: i64,
}

/// A waiting partition in memory: its best rows, best first (ties in arrival order).
struct Part {
    top: Vec<Waiting>,
    /// The batch that last had rows of the partition.
    touched: u64,
    /// What it takes in memory, as [`part_bytes`] counts it.
    bytes: u64,
}

/// Memory of a partition besides its rows and its key's bytes (twice: in the map and in
/// the deadlines): the entries' headers and slack (about).
const PART_OVERHEAD: usize = 128;
/// Memory of a waiting row besides its bytes (about).
const WAITING_OVERHEAD: usize = 64;
/// Memory of the deadline entry of a partition on disk besides its key's bytes (about).
const TIMER_OVERHEAD: u64 = 48;

/// What partition `key` waiting with rows `top` takes in memory (about).
fn part_bytes(key: &OwnedRow, top: &[Waiting]) -> u64 {
    let rows: usize = top.iter().map(Waiting::bytes).sum();
    (PART_OVERHEAD + 2 * key.row().as_ref().len() + rows) as u64
}

impl Waiting {
    /// What the row takes in memory (about).
    fn bytes(&self) -> usize {
        WAITING_OVERHEAD + self.sort.row().as_ref().len() + self.row.row().as_ref().len()
    }
}

/// What the deadline of partition `key`, on disk, takes in memory (about).
fn timer_bytes(key: &OwnedRow) -> u64 {
    TIMER_OVERHEAD + key.row().as_ref().len() as u64
}

/// A partition's rows as bytes on disk: each row's deadline, sort key and row.
fn encode_top(top: &[Waiting]) -> Vec<u8> {
    let capacity = top.iter().map(|w| w.bytes()).sum();
    // (A deadline is stored as the bits of its i64.)
    encode_ranked(
        top.iter().map(|w| (w.deadline as u64, &w.sort, &w.row)),
        capacity,
    )
}

/// The rows [`encode_top`] wrote, with the converters that made their sort keys and rows.
fn decode_top(bytes: &[u8], order: &RowConverter, full: &RowConverter) -> Result<Vec<Waiting>> {
    let rows = decode_ranked(bytes, order, full)?;
    Ok((rows.into_iter())
        .map(|(deadline, sort, row)| Waiting {
            sort,
            row,
            deadline: deadline as i64,
        })
        .collect())
}

struct FinalTopN {
    partition: Vec<usize>,
    order: Vec<usize>,
    limit: usize,
    row_number: Option<DataType>,
    deadline: Deadline,
    input_schema: SchemaRef,
    output: SchemaRef,
    partition_rows: RowConverter,
    order_rows: RowConverter,
    full_rows: RowConverter,
    /// The waiting partitions in memory.
    waiting: HashMap<OwnedRow, Part>,
    /// The waiting partitions (in memory and on disk) by deadline (their best row's), so
    /// that a watermark visits only the partitions it makes final.
    by_deadline: BTreeSet<(i64, OwnedRow)>,
    /// Partitions already emitted (keep-first deduplication), with their emitted row.
    emitted: HashSet<OwnedRow>,
    watermark: i64,
    max_parallelism: usize,
    /// What the partitions in `waiting` take, as [`part_bytes`] counts it.
    hot_bytes: u64,
    /// Waiting partitions moved to disk (see the module docs).
    cold: ColdEntries,
    /// What the deadlines of the partitions on disk take, as [`timer_bytes`] counts it.
    cold_timer_bytes: u64,
    memory: Option<Arc<StateMemory>>,
    /// Batches processed: when partitions last had rows.
    batches: u64,
}

impl FinalTopN {
    /// The deadline of each row, in ms.
    fn deadlines(&self, batch: &RecordBatch) -> Result<Vec<i64>> {
        let ms = weir_sql::group_windows::epoch_millis(batch.column(self.deadline.column))?;
        Ok((0..ms.len())
            .map(|i| {
                if ms.is_null(i) {
                    i64::MIN // a NULL time is final at once
                } else {
                    ms.value(i).saturating_add(self.deadline.offset_ms)
                }
            })
            .collect())
    }

    fn add(&mut self, batch: &RecordBatch, late_too: bool) -> Result<()> {
        let part = self
            .partition_rows
            .convert_columns(&keys::columns(batch, &self.partition))?;
        let order: Vec<ArrayRef> = self
            .order
            .iter()
            .map(|c| batch.column(*c).clone())
            .collect();
        let sort = self.order_rows.convert_columns(&order)?;
        let full = self.full_rows.convert_columns(batch.columns())?;
        let deadlines = self.deadlines(batch)?;
        for (i, deadline) in deadlines.into_iter().enumerate() {
            let key = part.row(i).owned();
            if !late_too && deadline <= self.watermark {
                continue; // late: its partition is final already
            }
            if self.deadline.once_per_key && self.emitted.contains(&key) {
                continue;
            }
            if !self.waiting.contains_key(&key)
                && let Some(top) = self.take_cold(&key)?
            {
                self.keep(key.clone(), top, self.batches);
            }
            let entry = self.waiting.entry(key.clone()).or_insert(Part {
                top: Vec::new(),
                touched: self.batches,
                bytes: 0,
            });
            entry.touched = self.batches;
            let top = &mut entry.top;
            let s = sort.row(i);
            let at = top.partition_point(|w| w.sort.row() <= s);
            if at >= self.limit {
                continue;
            }
            if at == 0 {
                // A new best row: the partition's deadline is its.
                if let Some(old) = top.first() {
                    self.by_deadline.remove(&(old.deadline, key.clone()));
                }
                self.by_deadline.insert((deadline, key.clone()));
            }
            top.insert(
                at,
                Waiting {
                    sort: s.owned(),
                    row: full.row(i).owned(),
                    deadline,
                },
            );
            top.truncate(self.limit);
            let bytes = part_bytes(&key, top);
            self.hot_bytes = self.hot_bytes + bytes - entry.bytes;
            entry.bytes = bytes;
        }
        Ok(())
    }

    /// Keeps partition `key` waiting with rows `top` in memory, last touched by batch
    /// `touched`.
    fn keep(&mut self, key: OwnedRow, top: Vec<Waiting>, touched: u64) {
        let bytes = part_bytes(&key, &top);
        self.hot_bytes += bytes;
        let part = Part {
            top,
            touched,
            bytes,
        };
        if let Some(old) = self.waiting.insert(key, part) {
            self.hot_bytes -= old.bytes;
        }
    }

    /// The rows of partition `key` taken off the disk, if it is there.
    fn take_cold(&mut self, key: &OwnedRow) -> Result<Option<Vec<Waiting>>> {
        if self.cold.is_empty() {
            return Ok(None);
        }
        let hash = cold::hash(key.row().as_ref());
        if !self.cold.may_hold(hash) {
            return Ok(None);
        }
        let Some((value, _)) = self.cold.take(hash, key.row().as_ref())? else {
            return Ok(None);
        };
        self.cold_timer_bytes -= timer_bytes(key);
        decode_top(&value, &self.order_rows, &self.full_rows).map(Some)
    }

    /// While the job's state is over its budget, moves the waiting partitions that least
    /// recently had rows to disk.
    fn relieve(&mut self) -> Result<()> {
        if !self.cold.set_hot(self.hot_bytes + self.cold_timer_bytes) {
            return Ok(());
        }
        let moving = cold::least_recently_used(
            self.waiting.iter().map(|(k, p)| (k, p.touched)),
            |k| self.waiting[*k].bytes,
            self.hot_bytes,
            (self.cold.hot_target()).saturating_sub(self.cold_timer_bytes),
        );
        let moving: Vec<OwnedRow> = moving.into_iter().map(|(k, _)| k.clone()).collect();
        for key in moving {
            let part = self.waiting.remove(&key).expect("a waiting partition");
            let (k, value) = (key.row(), encode_top(&part.top));
            if self
                .cold
                .put(cold::hash(k.as_ref()), k.as_ref(), &value, part.touched)?
            {
                self.hot_bytes -= part.bytes;
                self.cold_timer_bytes += timer_bytes(&key);
            } else {
                self.waiting.insert(key, part);
            }
        }
        self.cold.set_hot(self.hot_bytes + self.cold_timer_bytes);
        Ok(())
    }

    /// The snapshot rows (waiting, not emitted) of partitions read from disk.
    fn rows_from_disk(&self, values: &[Vec<u8>]) -> Result<RecordBatch> {
        let mut waiting = Vec::new();
        for value in values {
            waiting.extend(decode_top(value, &self.order_rows, &self.full_rows)?);
        }
        self.waiting_batch(waiting.iter().map(|w| w.row.row()))
    }

    /// Waiting rows as snapshot rows.
    fn waiting_batch<'a>(
        &self,
        rows: impl Iterator<Item = arrow::row::Row<'a>>,
    ) -> Result<RecordBatch> {
        let rows: Vec<arrow::row::Row<'a>> = rows.collect();
        let n = rows.len();
        let mut columns = self.full_rows.convert_rows(rows)?;
        columns.push(Arc::new(BooleanArray::from(vec![false; n])));
        Ok(RecordBatch::try_new(self.state_schema(), columns)?)
    }

    /// Emits the partitions that are final at `watermark`.
    fn fire(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        let mut due = Vec::new();
        while let Some(first) = self.by_deadline.first()
            && first.0 <= watermark
        {
            due.push(self.by_deadline.pop_first().expect("first").1);
        }
        if due.is_empty() {
            return Ok(());
        }
        let mut rows = Vec::new();
        let mut ranks = Vec::new();
        for key in due {
            let top = match self.waiting.remove(&key) {
                Some(part) => {
                    self.hot_bytes -= part.bytes;
                    part.top
                }
                None => self.take_cold(&key)?.ok_or_else(|| {
                    Error::internal("a final partition is neither in memory nor on disk")
                })?,
            };
            for (rank, w) in top.into_iter().enumerate() {
                rows.push(w.row);
                ranks.push(rank as u64 + 1);
            }
            if self.deadline.once_per_key {
                self.emitted.insert(key);
            }
        }
        let mut columns = self.full_rows.convert_rows(rows.iter().map(|r| r.row()))?;
        if let Some(t) = &self.row_number {
            let ranks: ArrayRef = Arc::new(arrow::array::UInt64Array::from(ranks));
            columns.push(arrow::compute::cast(&ranks, t)?);
        }
        out.emit(RecordBatch::try_new(self.output.clone(), columns)?);
        Ok(())
    }

    /// Takes restored snapshot batches back: emitted keys into `emitted`, waiting rows
    /// into their partitions.
    fn restore_item(&mut self, batches: &[RecordBatch]) -> Result<()> {
        for batch in batches {
            let width = batch.num_columns() - 1;
            let flags = batch.column(width).as_boolean().clone();
            let rows = RecordBatch::try_new(
                keys::nullable(&self.input_schema),
                batch.columns()[..width].to_vec(),
            )?;
            let emitted = arrow::compute::filter_record_batch(&rows, &flags)?;
            let keys = self
                .partition_rows
                .convert_columns(&keys::columns(&emitted, &self.partition))?;
            for i in 0..emitted.num_rows() {
                self.emitted.insert(keys.row(i).owned());
            }
            let waiting =
                arrow::compute::filter_record_batch(&rows, &arrow::compute::not(&flags)?)?;
            self.add(&waiting, true)?;
        }
        Ok(())
    }

    fn state_schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = keys::nullable(&self.input_schema)
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("__weir_emitted", DataType::Boolean, false));
        Arc::new(Schema::new(fields))
    }
}

#[async_trait]
impl Operator for FinalTopN {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        let Some(state) = restored else {
            return Ok(());
        };
        // An item at a time, so that a restore past the budget moves partitions to disk
        // as it goes.
        for item in &state.items {
            self.restore_item(&item_batches(&state, item)?)?;
            self.relieve()?;
        }
        Ok(())
    }

    async fn process_batch(&mut self, _: usize, batch: RecordBatch, _: &mut Output) -> Result<()> {
        if changelog::is_changelog(&batch) {
            return Err(Error::internal("a final Top-N received a changelog"));
        }
        self.batches += 1;
        self.add(&batch, false)?;
        self.relieve()
    }

    async fn process_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        if watermark > self.watermark {
            self.watermark = watermark;
            self.fire(watermark, out)?;
            self.relieve()?;
        }
        out.emit_watermark(watermark);
        Ok(())
    }

    fn state_bytes(&self) -> usize {
        (self.hot_bytes + self.cold.on_disk()) as usize
            + self
                .emitted
                .iter()
                .map(|k| k.row().as_ref().len())
                .sum::<usize>()
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        let mut batches = Vec::new();
        if !self.waiting.is_empty() {
            let rows = (self.waiting.values()).flat_map(|p| p.top.iter().map(|w| w.row.row()));
            batches.push(self.waiting_batch(rows)?);
        }
        if !self.emitted.is_empty() {
            // An emitted key is stored as a row holding the key (other columns NULL).
            let keys: Vec<arrow::row::Row<'_>> = self.emitted.iter().map(|k| k.row()).collect();
            let key_columns = self.partition_rows.convert_rows(keys.iter().copied())?;
            let n = keys.len();
            let mut columns: Vec<ArrayRef> = self
                .input_schema
                .fields()
                .iter()
                .map(|f| arrow::array::new_null_array(f.data_type(), n))
                .collect();
            for (k, c) in self.partition.iter().zip(key_columns) {
                columns[*k] = c;
            }
            columns.push(Arc::new(BooleanArray::from(vec![true; n])));
            batches.push(RecordBatch::try_new(self.state_schema(), columns)?);
        }
        let mut state = if batches.is_empty() {
            OperatorState::new(StateDistribution::KeyGroups, Vec::new())
        } else {
            let all = arrow::compute::concat_batches(&self.state_schema(), &batches)?;
            keyed_state(&all, &self.partition, self.max_parallelism)?
        };
        if !self.cold.is_empty() {
            snapshot_entries(
                &self.cold,
                |values| self.rows_from_disk(values),
                &self.partition,
                self.max_parallelism,
                self.memory.as_ref(),
                &mut state,
            )?;
        }
        Ok(state)
    }
}
