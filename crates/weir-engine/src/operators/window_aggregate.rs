//! `WindowAggregate`: event-time window aggregation with DataFusion accumulators.
//!
//! Input arrives hash-partitioned by the group keys (which include `window_end`). Each
//! group — one key in one window — keeps one accumulator per aggregate function. When the
//! watermark reaches a window's last millisecond (`window_end - 1`), its groups are
//! evaluated, emitted and dropped; rows for windows already fired are late and dropped, as
//! in Flink. State is keyed: a snapshot stores each key group's groups (keys, window end and
//! accumulator states) as an Arrow IPC batch, so a restore at another parallelism hands
//! every key group to its new owner.

use super::state::{decode_batches, encode_batch};
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimeUnit};
use arrow::row::{OwnedRow, RowConverter, SortField};
use async_trait::async_trait;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;
use std::collections::HashMap;
use std::sync::Arc;
use weir_common::{CheckpointId, Result};
use weir_runtime::exchange::{hash_rows, key_group};
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
    accumulators: Vec<Box<dyn Accumulator>>,
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

fn millis(a: &ArrayRef) -> Result<Vec<i64>> {
    let ms = arrow::compute::cast(a, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
    let ms = arrow::compute::cast(&ms, &DataType::Int64)?;
    Ok(ms.as_primitive::<Int64Type>().values().to_vec())
}

impl WindowAggregate {
    fn new_accumulators(&self) -> Result<Vec<Box<dyn Accumulator>>> {
        self.aggregates
            .iter()
            .map(|a| Ok(a.function.create_accumulator()?))
            .collect()
    }

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
        let mut values: Vec<Vec<ScalarValue>> =
            vec![Vec::with_capacity(ready.len()); self.aggregates.len()];
        for key in &ready {
            let mut group = self.groups.remove(key).expect("group");
            for (i, acc) in group.accumulators.iter_mut().enumerate() {
                values[i].push(acc.evaluate()?);
            }
        }
        for (i, v) in values.into_iter().enumerate() {
            let array = ScalarValue::iter_to_array(v)?;
            let want = self.schema.field(self.keys.len() + i).data_type();
            columns.push(if array.data_type() == want {
                array
            } else {
                arrow::compute::cast(&array, want)?
            });
        }
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
        for item in restored.map(|s| s.items).unwrap_or_default() {
            for batch in decode_batches(item["batch"].as_str().unwrap_or_default())? {
                let k = self.keys.len();
                let key_columns: Vec<ArrayRef> = batch.columns()[..k].to_vec();
                let rows = self.converter.convert_columns(&key_columns)?;
                let ends = millis(batch.column(k))?;
                for r in 0..batch.num_rows() {
                    let mut accumulators = self.new_accumulators()?;
                    let mut col = k + 1;
                    for (a, acc) in accumulators.iter_mut().enumerate() {
                        let n = self.aggregates[a].function.state_fields()?.len();
                        let states: Vec<ArrayRef> = (col..col + n)
                            .map(|c| batch.column(c).slice(r, 1))
                            .collect();
                        acc.merge_batch(&states)?;
                        col += n;
                    }
                    self.groups.insert(
                        rows.row(r).owned(),
                        Group {
                            end_ms: ends[r],
                            accumulators,
                        },
                    );
                }
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
        let mut inputs: Vec<Vec<ArrayRef>> = Vec::with_capacity(self.aggregates.len());
        let mut filters: Vec<Option<BooleanArray>> = Vec::with_capacity(self.aggregates.len());
        for a in &self.aggregates {
            inputs.push(
                a.function
                    .expressions()
                    .iter()
                    .map(|e| e.evaluate(&batch).and_then(|v| v.into_array(n)))
                    .collect::<Result<Vec<_>, _>>()?,
            );
            filters.push(match &a.filter {
                Some(f) => Some(f.evaluate(&batch)?.into_array(n)?.as_boolean().clone()),
                None => None,
            });
        }
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
                let accumulators = self.new_accumulators()?;
                self.groups.insert(
                    key.clone(),
                    Group {
                        end_ms: ends[first],
                        accumulators,
                    },
                );
            }
            let group = self.groups.get_mut(&key).expect("group");
            let take = UInt32Array::from(idx);
            for (a, acc) in group.accumulators.iter_mut().enumerate() {
                let mut columns = inputs[a]
                    .iter()
                    .map(|c| arrow::compute::take(c, &take, None))
                    .collect::<Result<Vec<_>, _>>()?;
                if let Some(filter) = &filters[a] {
                    let mask = arrow::compute::take(filter, &take, None)?;
                    let mask = mask.as_boolean();
                    columns = columns
                        .iter()
                        .map(|c| arrow::compute::filter(c, mask))
                        .collect::<Result<Vec<_>, _>>()?;
                }
                acc.update_batch(&columns)?;
            }
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
        let keys: Vec<OwnedRow> = self.groups.keys().cloned().collect();
        let mut columns = self.converter.convert_rows(keys.iter().map(|r| r.row()))?;
        let k = columns.len();
        let key_batch = RecordBatch::try_new(
            Arc::new(Schema::new(
                self.keys
                    .iter()
                    .map(|i| {
                        self.input_schema
                            .field(*i)
                            .as_ref()
                            .clone()
                            .with_nullable(true)
                    })
                    .collect::<Vec<_>>(),
            )),
            columns.clone(),
        )?;
        let key_groups: Vec<usize> = hash_rows(&key_batch, &(0..k).collect::<Vec<_>>())?
            .into_iter()
            .map(|h| key_group(h, self.max_parallelism))
            .collect();
        let mut fields: Vec<Field> = key_batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        columns.push(Arc::new(arrow::array::Int64Array::from(
            keys.iter()
                .map(|r| self.groups[r].end_ms)
                .collect::<Vec<_>>(),
        )));
        fields.push(Field::new("__window_end_ms", DataType::Int64, false));
        for (a, spec) in self.aggregates.iter().enumerate() {
            let state_fields = spec.function.state_fields()?;
            let mut per_field: Vec<Vec<ScalarValue>> =
                vec![Vec::with_capacity(keys.len()); state_fields.len()];
            for key in &keys {
                let state = self.groups.get_mut(key).expect("group").accumulators[a].state()?;
                for (j, v) in state.into_iter().enumerate() {
                    per_field[j].push(v);
                }
            }
            for (j, values) in per_field.into_iter().enumerate() {
                let array = ScalarValue::iter_to_array(values)?;
                fields.push(Field::new(
                    format!("__state_{a}_{j}"),
                    array.data_type().clone(),
                    true,
                ));
                let _ = &state_fields[j];
                columns.push(array);
            }
        }
        let all = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
        let mut by_group: HashMap<usize, Vec<u32>> = HashMap::new();
        for (row, kg) in key_groups.iter().enumerate() {
            by_group.entry(*kg).or_default().push(row as u32);
        }
        let mut items = Vec::new();
        for (kg, rows) in by_group {
            let idx = UInt32Array::from(rows);
            let part = arrow::compute::take_record_batch(&all, &idx)?;
            items.push(serde_json::json!({ "kg": kg, "batch": encode_batch(&part)? }));
        }
        Ok(OperatorState::new(StateDistribution::KeyGroups, items))
    }
}
