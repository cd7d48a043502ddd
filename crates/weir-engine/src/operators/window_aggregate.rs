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

use super::aggregate::{AggregateInputs, groups_accumulator};
use super::state::{keyed_state, restored_batches};
use arrow::array::{ArrayRef, AsArray, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_plan::aggregates::group_values::{GroupValues, new_group_values};
use datafusion::physical_plan::aggregates::order::GroupOrdering;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use weir_common::{CheckpointId, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, StateDistribution, TaskInfo};
use weir_sql::AggregateSpec;
use weir_sql::group_windows::{epoch_millis, from_epoch_millis};

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
        }))
    }
}

/// The groups of one window.
struct Window {
    groups: Box<dyn GroupValues>,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
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
        })
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
            let mut window = entry.remove();
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
                RecordBatch::try_new(self.schema.clone(), batch.columns().to_vec())
                    .unwrap_or(batch),
            );
        }
        Ok(())
    }
}

#[async_trait]
impl Operator for WindowAggregate {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        let k = self.keys.len();
        // How many state columns each aggregate has (asked of fresh accumulators: asking
        // a loaded one would drain it).
        let widths = self
            .aggregates
            .iter()
            .map(|a| Ok(groups_accumulator(a)?.state(EmitTo::All)?.len()))
            .collect::<Result<Vec<_>>>()?;
        for batch in restored_batches(restored)? {
            let ends = batch.column(k).as_primitive::<Int64Type>().clone();
            let mut rows_of: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
            for (r, end) in ends.values().iter().enumerate() {
                rows_of.entry(*end).or_default().push(r as u32);
            }
            for (end, rows) in rows_of {
                let part = arrow::compute::take_record_batch(&batch, &UInt32Array::from(rows))?;
                if !self.windows.contains_key(&end) {
                    let window = self.new_window()?;
                    self.windows.insert(end, window);
                }
                let window = self.windows.get_mut(&end).expect("window");
                let mut ids = Vec::new();
                window.groups.intern(&part.columns()[..k], &mut ids)?;
                let total = window.groups.len();
                let mut col = k + 1;
                for (acc, n) in window.accumulators.iter_mut().zip(&widths) {
                    let n = *n;
                    acc.merge_batch(&part.columns()[col..col + n], &ids, total)?;
                    col += n;
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
        Ok(())
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
        self.windows
            .values()
            .map(|w| w.groups.size() + w.accumulators.iter().map(|a| a.size()).sum::<usize>())
            .sum()
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
        let mut parts = Vec::new();
        for (end, window) in self.windows.iter_mut() {
            if window.groups.is_empty() {
                continue;
            }
            // Emitting is destructive: take everything out, then load it back.
            let keys = window.groups.emit(EmitTo::All)?;
            let states = window
                .accumulators
                .iter_mut()
                .map(|a| a.state(EmitTo::All))
                .collect::<Result<Vec<_>, _>>()?;
            // Some group-value tables keep their index after emitting: reset them.
            window
                .groups
                .clear_shrink(keys.first().map_or(0, |k| k.len()));
            let mut ids = Vec::new();
            window.groups.intern(&keys, &mut ids)?;
            let total = window.groups.len();
            for (acc, state) in window.accumulators.iter_mut().zip(&states) {
                acc.merge_batch(state, &ids, total)?;
            }
            let mut fields: Vec<Field> = self
                .key_schema
                .fields()
                .iter()
                .map(|f| f.as_ref().clone())
                .collect();
            let mut columns = keys;
            fields.push(Field::new("__window_end_ms", DataType::Int64, false));
            columns.push(Arc::new(arrow::array::Int64Array::from(vec![*end; total])));
            for (a, state) in states.into_iter().enumerate() {
                for (j, column) in state.into_iter().enumerate() {
                    fields.push(Field::new(
                        format!("__state_{a}_{j}"),
                        column.data_type().clone(),
                        true,
                    ));
                    columns.push(column);
                }
            }
            parts.push(RecordBatch::try_new(
                Arc::new(Schema::new(fields)),
                columns,
            )?);
        }
        let Some(first) = parts.first() else {
            return Ok(OperatorState::new(StateDistribution::KeyGroups, Vec::new()));
        };
        let all = arrow::compute::concat_batches(&first.schema(), &parts)?;
        keyed_state(&all, &self.partition, self.max_parallelism)
    }
}
