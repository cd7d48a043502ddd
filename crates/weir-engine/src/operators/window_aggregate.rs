//! `WindowAggregate`: event-time window aggregation with DataFusion accumulators.
//!
//! Input arrives hash-partitioned by the group keys (which include `window_end`). Each
//! group — one key in one window — keeps one accumulator per aggregate function. When the
//! watermark reaches a window's last millisecond (`window_end - 1`), its groups are
//! evaluated, emitted and dropped; rows for windows already fired are late and dropped, as
//! in Flink. State is keyed: a snapshot stores each key group's groups (keys, window end and
//! accumulator states) as an Arrow IPC batch, so a restore at another parallelism hands
//! every key group to its new owner.

use super::aggregate::{
    Accumulators, AggregateInputs, evaluate, new_accumulators, restore_accumulators, state_columns,
    value_columns,
};
use super::state::{keyed_items, restored_batches};
use arrow::array::{ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimeUnit};
use arrow::row::{OwnedRow, RowConverter, SortField};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Arc;
use weir_common::{CheckpointId, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, StateDistribution, TaskInfo};
use weir_sql::AggregateSpec;

/// Creates window aggregate operators.
pub struct WindowAggregateFactory {
    /// Group columns of the input (they include `window_end`).
    pub keys: Vec<usize>,
    /// Position of `window_end` among `keys`.
    pub window_end: usize,
    /// The aggregate functions.
    pub aggregates: Vec<AggregateSpec>,
    /// Schema of the input.
    pub input_schema: SchemaRef,
    /// Output schema: group columns, then one column per aggregate.
    pub schema: SchemaRef,
}

impl OperatorFactory for WindowAggregateFactory {
    fn name(&self) -> String {
        let aggs: Vec<String> = self
            .aggregates
            .iter()
            .map(|a| a.function.name().to_string())
            .collect();
        let keys: Vec<String> = self
            .keys
            .iter()
            .map(|k| self.input_schema.field(*k).name().clone())
            .collect();
        format!(
            "WindowAggregate(keys: {}; {})",
            keys.join(", "),
            aggs.join(", ")
        )
    }
    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let key_fields: Vec<SortField> = self
            .keys
            .iter()
            .map(|k| SortField::new(self.input_schema.field(*k).data_type().clone()))
            .collect();
        Ok(Box::new(WindowAggregate {
            keys: self.keys.clone(),
            window_end: self.window_end,
            aggregates: self.aggregates.clone(),
            input_schema: self.input_schema.clone(),
            schema: self.schema.clone(),
            converter: RowConverter::new(key_fields)?,
            groups: HashMap::new(),
            watermark: i64::MIN,
            max_parallelism: task.max_parallelism,
        }))
    }
}

struct Group {
    end_ms: i64,
    accumulators: Accumulators,
}

struct WindowAggregate {
    keys: Vec<usize>,
    window_end: usize,
    aggregates: Vec<AggregateSpec>,
    input_schema: SchemaRef,
    schema: SchemaRef,
    converter: RowConverter,
    groups: HashMap<OwnedRow, Group>,
    watermark: i64,
    max_parallelism: usize,
}

/// Milliseconds of a time column, or of the `end` of a legacy window-key struct.
fn millis(a: &ArrayRef) -> Result<Vec<i64>> {
    if matches!(a.data_type(), DataType::Struct(_)) {
        return Ok(weir_sql::group_windows::bounds(a)?.1);
    }
    let ms = arrow::compute::cast(a, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
    let ms = arrow::compute::cast(&ms, &DataType::Int64)?;
    Ok(ms.as_primitive::<Int64Type>().values().to_vec())
}

impl WindowAggregate {
    /// Emits every group whose window ended at or before `watermark`.
    fn fire(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        let mut ready: Vec<OwnedRow> = self
            .groups
            .iter()
            .filter(|(_, g)| g.end_ms - 1 <= watermark)
            .map(|(k, _)| k.clone())
            .collect();
        if ready.is_empty() {
            return Ok(());
        }
        ready.sort_by_key(|k| self.groups[k].end_ms);
        let mut columns = self.converter.convert_rows(ready.iter().map(|r| r.row()))?;
        let mut values = Vec::with_capacity(ready.len());
        for key in &ready {
            let mut group = self.groups.remove(key).expect("group");
            values.push(evaluate(&mut group.accumulators)?);
        }
        let types: Vec<DataType> = self.schema.fields()[self.keys.len()..]
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        columns.extend(value_columns(values, &types)?);
        let relaxed = Arc::new(Schema::new(
            self.schema
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        ));
        let batch = RecordBatch::try_new(relaxed, columns)?;
        out.emit(
            RecordBatch::try_new(self.schema.clone(), batch.columns().to_vec()).unwrap_or(batch),
        );
        Ok(())
    }
}

#[async_trait]
impl Operator for WindowAggregate {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        let k = self.keys.len();
        for batch in restored_batches(restored)? {
            let rows = self.converter.convert_columns(&batch.columns()[..k])?;
            let ends = millis(batch.column(k))?;
            for r in 0..batch.num_rows() {
                let accumulators = restore_accumulators(&self.aggregates, false, &batch, k + 1, r)?;
                self.groups.insert(
                    rows.row(r).owned(),
                    Group {
                        end_ms: ends[r],
                        accumulators,
                    },
                );
            }
        }
        Ok(())
    }

    async fn process_batch(&mut self, _: usize, batch: RecordBatch, _: &mut Output) -> Result<()> {
        let n = batch.num_rows();
        let key_columns: Vec<ArrayRef> =
            self.keys.iter().map(|k| batch.column(*k).clone()).collect();
        let rows = self.converter.convert_columns(&key_columns)?;
        let ends = millis(&key_columns[self.window_end])?;
        let inputs = AggregateInputs::evaluate(&self.aggregates, &batch)?;
        // Rows of each group, in arrival order; late rows are dropped.
        let mut index: HashMap<arrow::row::Row<'_>, usize> = HashMap::new();
        let mut members: Vec<(usize, Vec<u32>)> = Vec::new();
        for i in 0..n {
            if ends[i] - 1 <= self.watermark {
                continue;
            }
            let slot = *index.entry(rows.row(i)).or_insert_with(|| {
                members.push((i, Vec::new()));
                members.len() - 1
            });
            members[slot].1.push(i as u32);
        }
        for (first, idx) in members {
            let key = rows.row(first).owned();
            if !self.groups.contains_key(&key) {
                let accumulators = new_accumulators(&self.aggregates, false)?;
                self.groups.insert(
                    key.clone(),
                    Group {
                        end_ms: ends[first],
                        accumulators,
                    },
                );
            }
            let group = self.groups.get_mut(&key).expect("group");
            inputs.feed(&mut group.accumulators, &idx, false)?;
        }
        Ok(())
    }

    async fn process_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        if watermark > self.watermark {
            self.watermark = watermark;
            self.fire(watermark, out)?;
        }
        out.emit_watermark(watermark);
        Ok(())
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        if self.groups.is_empty() {
            return Ok(OperatorState::new(StateDistribution::KeyGroups, Vec::new()));
        }
        let mut key_rows = Vec::with_capacity(self.groups.len());
        let mut ends = Vec::with_capacity(self.groups.len());
        let mut accumulators = Vec::with_capacity(self.groups.len());
        for (key, group) in self.groups.iter_mut() {
            key_rows.push(key.row());
            ends.push(group.end_ms);
            accumulators.push(&mut group.accumulators);
        }
        let mut columns = self.converter.convert_rows(key_rows)?;
        let mut fields: Vec<Field> = self
            .keys
            .iter()
            .map(|i| {
                self.input_schema
                    .field(*i)
                    .as_ref()
                    .clone()
                    .with_nullable(true)
            })
            .collect();
        let k = columns.len();
        columns.push(Arc::new(arrow::array::Int64Array::from(ends)));
        fields.push(Field::new("__window_end_ms", DataType::Int64, false));
        for (field, column) in state_columns(accumulators.into_iter())? {
            fields.push(field);
            columns.push(column);
        }
        let all = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
        let items = keyed_items(&all, &(0..k).collect::<Vec<_>>(), self.max_parallelism)?;
        Ok(OperatorState::new(StateDistribution::KeyGroups, items))
    }
}
