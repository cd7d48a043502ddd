//! `WindowAggregate`: event-time window aggregation with DataFusion's vectorized group
//! machinery.
//!
//! Input arrives hash-partitioned by the group keys (which include `window_end`). Each
//! open window has its own `GroupValues` (DataFusion's hash table from key columns to
//! group ids) and one `GroupsAccumulator` per aggregate function (native ones where the
//! function has them, DataFusion's adapter over row accumulators otherwise), so a batch
//! updates a window's groups in one call per aggregate. When the watermark reaches a
//! window's last millisecond (`window_end - 1`), the window emits all its groups at once
//! and is dropped; rows for windows already fired are late and dropped, as in Flink.
//! Windows over `PROCTIME()` fire instead when the wall clock reaches their end (a
//! processing-time timer) and at the end of input.
//!
//! State is keyed: a snapshot emits every window's keys and accumulator states (then loads
//! them back, as DataFusion's emit is destructive) and stores them per key group as Arrow
//! IPC, so a restore at another parallelism hands every key group to its new owner.
//!
//! # State larger than memory
//! The windows' tables count against the job's state budget
//! (`taskmanager.memory.managed.size`). When the job is over it and this operator over
//! its share, every window's table is emptied into *runs*: its keys and partial states,
//! split by a key hash into [`BUCKETS`] buckets, one batch each, kept in a [`BatchStore`]
//! that moves the older ones to local disk. The tables start again empty, so a group may
//! have partial states in several runs and in the table. When the window fires it is
//! merged a bucket at a time — the bucket's runs read back and the table's rows of that
//! bucket merged into a fresh table, evaluated and emitted — so firing holds a
//! sixteenth of the window's groups, not all of them (a hash aggregation that spills by
//! partition, as a grace hash join does).
//!
//! A snapshot writes the tables by key group as above, and each run as an item of its own
//! for the subtask's key-group range (`{"kgs": [first, last], "run": true}`; a restore at
//! another parallelism keeps the rows of its own key groups). A run on disk is handed to
//! the checkpoint where it lies: runs never change, so an incremental checkpoint writes
//! each once. A restore puts all restored state into runs, under the budget as it goes.

use super::aggregate::{AggregateInputs, groups_accumulator};
use super::state::{item_batches, keyed_items};
use arrow::array::{ArrayRef, AsArray, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion::physical_plan::aggregates::order::GroupOrdering;
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;
use weir_common::{CheckpointId, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, StateDistribution, TaskInfo};
use weir_sql::AggregateSpec;
use weir_sql::group_windows::{epoch_millis, from_epoch_millis};
use weir_state::spill::{BatchStore, StateMemory};

/// Buckets a window's runs are split into by key hash (see the module docs).
const BUCKETS: usize = 16;

/// Creates window aggregate operators.
pub struct WindowAggregateFactory {
    /// Group columns of the input (they include `window_end`).
    pub keys: Vec<usize>,
    /// Position of `window_end` among `keys`.
    pub window_end: usize,
    /// Windows over `PROCTIME()` fire on the wall clock instead of on watermarks.
    pub processing_time: bool,
    /// The aggregate functions.
    pub aggregates: Vec<AggregateSpec>,
    /// Schema of the input.
    pub input_schema: SchemaRef,
    /// Output schema: group columns, then one column per aggregate.
    pub schema: SchemaRef,
    /// The job's state budget, if any.
    pub state_memory: Option<Arc<StateMemory>>,
}

impl WindowAggregateFactory {
    /// Positions among `keys` of the columns rows are partitioned (and state is split) by:
    /// every key for event-time windows; for processing-time windows, the keys without the
    /// window bounds, because a row in flight when its window fired moves to the next
    /// window and must stay on the subtask that owns that window of its group.
    fn partition(&self) -> Vec<usize> {
        (0..self.keys.len())
            .filter(|k| {
                !self.processing_time
                    || (*k != self.window_end
                        && !matches!(
                            self.input_schema.field(self.keys[*k]).name().as_str(),
                            "window_start" | "window_end" | "window_time"
                        ))
            })
            .collect()
    }

    /// The input columns of [`Self::partition`].
    pub fn partition_keys(&self) -> Vec<usize> {
        self.partition().iter().map(|k| self.keys[*k]).collect()
    }
}

impl OperatorFactory for WindowAggregateFactory {
    fn name(&self) -> String {
        format!(
            "WindowAggregate(keys: {}; {})",
            super::keys::names(&self.input_schema, &self.keys),
            super::aggregate::names(&self.aggregates)
        )
    }
    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let key_schema = super::keys::nullable(&self.input_schema.project(&self.keys)?);
        let relaxed = super::keys::nullable(&self.schema);
        // Each aggregate's state columns, asked of fresh accumulators (asking a loaded
        // one would drain it).
        let mut fields: Vec<Field> = (key_schema.fields().iter())
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new(WINDOW_END, DataType::Int64, false));
        let mut widths = Vec::with_capacity(self.aggregates.len());
        for (a, spec) in self.aggregates.iter().enumerate() {
            let state = groups_accumulator(spec)?.state(EmitTo::All)?;
            widths.push(state.len());
            for (j, column) in state.iter().enumerate() {
                fields.push(state_field(a, j, column));
            }
        }
        let runs = BatchStore::new(Arc::new(Schema::new(fields)), self.state_memory.clone());
        Ok(Box::new(WindowAggregate {
            keys: self.keys.clone(),
            window_end: self.window_end,
            processing_time: self.processing_time,
            aggregates: self.aggregates.clone(),
            key_schema,
            schema: self.schema.clone(),
            relaxed,
            windows: BTreeMap::new(),
            watermark: i64::MIN,
            max_parallelism: task.max_parallelism,
            partition: self.partition(),
            key_groups: weir_state::key::key_group_range(
                task.subtask,
                task.parallelism,
                task.max_parallelism,
            ),
            widths,
            runs,
            moved: false,
        }))
    }
}

/// The column of a state batch holding its rows' window end (milliseconds).
const WINDOW_END: &str = "__window_end_ms";

/// The field of state column `j` of aggregate `a` in a state batch.
fn state_field(a: usize, j: usize, column: &ArrayRef) -> Field {
    Field::new(format!("__state_{a}_{j}"), column.data_type().clone(), true)
}

/// The groups of one window.
struct Window {
    groups: Box<dyn GroupValues>,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
    /// Partial states moved out of the table: per bucket, positions in the operator's
    /// run store (empty while nothing moved).
    runs: Vec<Vec<usize>>,
}

struct WindowAggregate {
    keys: Vec<usize>,
    window_end: usize,
    processing_time: bool,
    aggregates: Vec<AggregateSpec>,
    /// The group columns, all nullable.
    key_schema: SchemaRef,
    schema: SchemaRef,
    relaxed: SchemaRef,
    /// Open windows by end (milliseconds).
    windows: BTreeMap<i64, Window>,
    watermark: i64,
    max_parallelism: usize,
    /// Positions among the keys that split state by key group (see the factory).
    partition: Vec<usize>,
    /// The key groups this subtask owns.
    key_groups: Range<usize>,
    /// How many state columns each aggregate has.
    widths: Vec<usize>,
    /// The windows' runs (see the module docs).
    runs: BatchStore,
    /// Whether tables were moved into runs yet (said once in the log).
    moved: bool,
}

/// Milliseconds of a time column, or of the `end` of a legacy window-key struct.
fn millis(a: &ArrayRef) -> Result<Vec<i64>> {
    if matches!(a.data_type(), DataType::Struct(_)) {
        return Ok(weir_sql::group_windows::bounds(a)?.1);
    }
    Ok(epoch_millis(a)?.values().to_vec())
}

impl WindowAggregate {
    fn new_window(&self) -> Result<Window> {
        Ok(Window {
            groups: new_group_values(self.key_schema.clone(), &GroupOrdering::None)?,
            accumulators: self
                .aggregates
                .iter()
                .map(groups_accumulator)
                .collect::<Result<_>>()?,
            runs: Vec::new(),
        })
    }

    /// Bytes of the windows' tables.
    fn table_bytes(&self) -> usize {
        self.windows
            .values()
            .map(|w| w.groups.size() + w.accumulators.iter().map(|a| a.size()).sum::<usize>())
            .sum()
    }

    /// Empties the table of the window ending at `end` into a state batch: its keys, the
    /// window end, then each aggregate's state columns (`None` when it holds no group).
    fn take_state(&self, end: i64, window: &mut Window) -> Result<Option<RecordBatch>> {
        if window.groups.is_empty() {
            return Ok(None);
        }
        let mut columns = window.groups.emit(EmitTo::All)?;
        let total = columns.first().map_or(0, |k| k.len());
        // Some group-value tables keep their index after emitting: reset them.
        window.groups.clear_shrink(total);
        let mut fields: Vec<Field> = (self.key_schema.fields().iter())
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new(WINDOW_END, DataType::Int64, false));
        columns.push(Arc::new(arrow::array::Int64Array::from(vec![end; total])));
        for (a, acc) in window.accumulators.iter_mut().enumerate() {
            for (j, column) in acc.state(EmitTo::All)?.into_iter().enumerate() {
                fields.push(state_field(a, j, &column));
                columns.push(column);
            }
        }
        Ok(Some(RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            columns,
        )?))
    }

    /// Merges a state batch's rows (of one window) into `window`'s table.
    fn load(&self, window: &mut Window, part: &RecordBatch) -> Result<()> {
        let k = self.keys.len();
        let mut ids = Vec::new();
        window.groups.intern(&part.columns()[..k], &mut ids)?;
        let total = window.groups.len();
        let mut col = k + 1;
        for (acc, n) in window.accumulators.iter_mut().zip(&self.widths) {
            acc.merge_batch(&part.columns()[col..col + n], &ids, total)?;
            col += n;
        }
        Ok(())
    }

    /// A state batch of one window split by the bucket of its keys.
    fn by_bucket(&self, batch: &RecordBatch) -> Result<Vec<(usize, RecordBatch)>> {
        let keys: Vec<usize> = (0..self.keys.len()).collect();
        let mut rows: Vec<Vec<u32>> = vec![Vec::new(); BUCKETS];
        for (r, h) in weir_state::key::hash_rows(batch, &keys)?.iter().enumerate() {
            // The top bits: the low ones pick the key group, shared by a subtask's keys.
            rows[(h >> 60) as usize % BUCKETS].push(r as u32);
        }
        let mut out = Vec::new();
        for (b, rows) in rows.into_iter().enumerate() {
            if !rows.is_empty() {
                let take = UInt32Array::from(rows);
                out.push((b, arrow::compute::take_record_batch(batch, &take)?));
            }
        }
        Ok(out)
    }

    /// Adds a state batch of the window ending at `end` to its runs.
    fn add_runs(&mut self, end: i64, batch: &RecordBatch) -> Result<()> {
        for (b, part) in self.by_bucket(batch)? {
            let at = self.runs.push(part)?;
            if !self.windows.contains_key(&end) {
                let window = self.new_window()?;
                self.windows.insert(end, window);
            }
            let window = self.windows.get_mut(&end).expect("window");
            window.runs.resize_with(BUCKETS, Vec::new);
            window.runs[b].push(at);
        }
        Ok(())
    }

    /// Counts the tables against the budget; past it, empties them into runs.
    fn relieve(&mut self) -> Result<()> {
        self.runs.set_overhead(self.table_bytes() as u64)?;
        if !self.runs.over_budget() {
            return Ok(());
        }
        if !self.moved {
            self.moved = true;
            if let Some(memory) = self.runs.memory() {
                memory.announce("moving partial window aggregates");
            }
        }
        let ends: Vec<i64> = self.windows.keys().copied().collect();
        for end in ends {
            let mut window = self.windows.remove(&end).expect("window");
            let state = self.take_state(end, &mut window)?;
            self.windows.insert(end, window);
            if let Some(state) = state {
                self.add_runs(end, &state)?;
            }
        }
        self.runs.set_overhead(self.table_bytes() as u64)
    }

    /// Processing time: rows stamped before their window fired (they were in flight)
    /// move to the first window still open, as if stamped on arrival, instead of emitting
    /// a window twice. Needs `window_start` among the keys to know the window size.
    fn move_to_open_window(&self, keys: &mut [ArrayRef], ends: &mut [i64]) -> Result<()> {
        let start = self
            .key_schema
            .fields()
            .iter()
            .position(|f| f.name() == "window_start")
            .filter(|s| keys[*s].data_type() == keys[self.window_end].data_type());
        let Some(start) = start else {
            return Ok(()); // without the size the rows stay (a window may fire twice)
        };
        let starts = millis(&keys[start])?;
        let mut new_starts = starts.clone();
        for (i, end) in ends.iter_mut().enumerate() {
            let size = (*end - starts[i]).max(1);
            while *end - 1 <= self.watermark {
                *end += size;
                new_starts[i] += size;
            }
        }
        keys[start] = from_epoch_millis(new_starts, keys[start].data_type())?;
        keys[self.window_end] =
            from_epoch_millis(ends.to_vec(), keys[self.window_end].data_type())?;
        Ok(())
    }

    /// Emits every window that ended at or before `watermark`, oldest first.
    fn fire(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        while let Some(entry) = self.windows.first_entry() {
            if *entry.key() - 1 > watermark {
                break;
            }
            let end = *entry.key();
            let mut window = entry.remove();
            if window.runs.is_empty() {
                self.emit(&mut window, out)?;
                continue;
            }
            // A bucket at a time: its runs and the table's rows of it.
            let mut table: Vec<Vec<RecordBatch>> = vec![Vec::new(); BUCKETS];
            if let Some(state) = self.take_state(end, &mut window)? {
                for (b, part) in self.by_bucket(&state)? {
                    table[b].push(part);
                }
            }
            for (b, table) in table.into_iter().enumerate() {
                let mut merged = self.new_window()?;
                for at in &window.runs[b] {
                    let run = self.runs.get(*at)?;
                    self.load(&mut merged, &run)?;
                    self.runs.drop_batch(*at);
                }
                for part in &table {
                    self.load(&mut merged, part)?;
                }
                if !merged.groups.is_empty() {
                    self.emit(&mut merged, out)?;
                }
            }
            if self.windows.values().all(|w| w.runs.is_empty()) {
                self.runs.clear();
            }
        }
        self.runs.set_overhead(self.table_bytes() as u64)
    }

    /// Emits every group of `window`'s table.
    fn emit(&self, window: &mut Window, out: &mut Output) -> Result<()> {
        let mut columns = window.groups.emit(EmitTo::All)?;
        for (a, acc) in window.accumulators.iter_mut().enumerate() {
            let values = acc.evaluate(EmitTo::All)?;
            let want = self.schema.field(self.keys.len() + a).data_type();
            columns.push(if values.data_type() == want {
                values
            } else {
                arrow::compute::cast(&values, want)?
            });
        }
        let batch = RecordBatch::try_new(self.relaxed.clone(), columns)?;
        out.emit(
            RecordBatch::try_new(self.schema.clone(), batch.columns().to_vec()).unwrap_or(batch),
        );
        Ok(())
    }

    /// The rows of a restored state batch whose key group this subtask owns.
    fn own_rows(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let hashes = weir_state::key::hash_rows(batch, &self.partition)?;
        let mine: arrow::array::BooleanArray = (hashes.iter())
            .map(|h| {
                let kg = weir_state::key::key_group(*h, self.max_parallelism);
                Some(self.key_groups.contains(&kg))
            })
            .collect();
        Ok(arrow::compute::filter_record_batch(batch, &mine)?)
    }
}

#[async_trait]
impl Operator for WindowAggregate {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        let Some(state) = restored else {
            return Ok(());
        };
        let k = self.keys.len();
        for item in &state.items {
            let groups = weir_state::keyed::item_key_groups(item, self.max_parallelism)?;
            let owned =
                self.key_groups.contains(groups.start()) && self.key_groups.contains(groups.end());
            for mut batch in item_batches(&state, item)? {
                if !owned {
                    batch = self.own_rows(&batch)?;
                }
                // Rows by window: every restored row goes into its window's runs.
                let ends = batch.column(k).as_primitive::<Int64Type>().clone();
                let mut rows_of: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
                for (r, end) in ends.values().iter().enumerate() {
                    rows_of.entry(*end).or_default().push(r as u32);
                }
                for (end, rows) in rows_of {
                    let take = UInt32Array::from(rows);
                    let part = arrow::compute::take_record_batch(&batch, &take)?;
                    self.add_runs(end, &part)?;
                }
            }
        }
        Ok(())
    }

    async fn process_batch(&mut self, _: usize, batch: RecordBatch, _: &mut Output) -> Result<()> {
        let mut key_columns: Vec<ArrayRef> =
            self.keys.iter().map(|k| batch.column(*k).clone()).collect();
        let mut ends = millis(&key_columns[self.window_end])?;
        if self.processing_time && ends.iter().any(|e| e - 1 <= self.watermark) {
            self.move_to_open_window(&mut key_columns, &mut ends)?;
        }
        let inputs = AggregateInputs::evaluate(&self.aggregates, &batch)?;
        // Rows per window (usually one window per batch); late rows are dropped.
        let mut rows_of: HashMap<i64, Vec<u32>> = HashMap::new();
        for (i, end) in ends.iter().enumerate() {
            if self.processing_time || end - 1 > self.watermark {
                rows_of.entry(*end).or_default().push(i as u32);
            }
        }
        let whole = rows_of.len() == 1 && rows_of.values().all(|r| r.len() == batch.num_rows());
        let mut ids = Vec::new();
        for (end, rows) in rows_of {
            let take = (!whole).then(|| UInt32Array::from(rows));
            let keys: Vec<ArrayRef> = match &take {
                None => key_columns.clone(),
                Some(t) => key_columns
                    .iter()
                    .map(|c| arrow::compute::take(c, t, None))
                    .collect::<Result<_, _>>()?,
            };
            if !self.windows.contains_key(&end) {
                let window = self.new_window()?;
                self.windows.insert(end, window);
            }
            let window = self.windows.get_mut(&end).expect("window");
            ids.clear();
            window.groups.intern(&keys, &mut ids)?;
            let total = window.groups.len();
            for (a, acc) in window.accumulators.iter_mut().enumerate() {
                let (values, filter) = inputs.columns(a, take.as_ref())?;
                acc.update_batch(&values, &ids, filter.as_ref(), total)?;
            }
        }
        self.relieve()
    }

    async fn process_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        // Processing-time windows ignore event time, but the end of input fires them all.
        if self.processing_time && watermark < weir_common::MAX_WATERMARK {
            out.emit_watermark(watermark);
            return Ok(());
        }
        if watermark > self.watermark {
            self.watermark = watermark;
            self.fire(watermark, out)?;
        }
        out.emit_watermark(watermark);
        Ok(())
    }

    fn state_bytes(&self) -> usize {
        self.table_bytes() + self.runs.bytes().0 as usize
    }

    fn next_timer(&self) -> Option<i64> {
        if !self.processing_time {
            return None;
        }
        self.windows.keys().next().map(|end| end - 1)
    }

    async fn on_timer(&mut self, now_ms: i64, out: &mut Output) -> Result<()> {
        // For processing-time windows, `watermark` records how far the clock has fired.
        self.watermark = self.watermark.max(now_ms);
        self.fire(now_ms, out)
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        let mut tables = Vec::new();
        let ends: Vec<i64> = self.windows.keys().copied().collect();
        for end in &ends {
            // Taking the state empties the table: load it back.
            let mut window = self.windows.remove(end).expect("window");
            let state = self.take_state(*end, &mut window)?;
            if let Some(state) = &state {
                self.load(&mut window, state)?;
            }
            self.windows.insert(*end, window);
            tables.extend(state);
        }
        let mut state = OperatorState::new(StateDistribution::KeyGroups, Vec::new());
        if let Some(first) = tables.first() {
            let all = arrow::compute::concat_batches(&first.schema(), &tables)?;
            keyed_items(&all, &self.partition, self.max_parallelism, &mut state)?;
        }
        let (first, last) = (self.key_groups.start, self.key_groups.end - 1);
        for end in &ends {
            let runs: Vec<usize> = self.windows[end].runs.iter().flatten().copied().collect();
            for at in runs {
                let payload = self.runs.payload(at)?;
                let mut item = weir_state::keyed::key_groups_fields(first, last);
                item["payload"] = state.add_disk_payload(payload);
                item["run"] = true.into();
                state.items.push(item);
            }
        }
        Ok(state)
    }
}
