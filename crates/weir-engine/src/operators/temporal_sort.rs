//! `TemporalSort`: `ORDER BY rowtime [, …]` in streaming mode (Flink's temporal sort).
//! Rows wait until the watermark reaches their time, then leave sorted by the `ORDER BY`
//! columns, so the output is append-only and in order. A row at or behind the watermark
//! when it arrives is late and dropped, as Flink drops it. It runs as one subtask; the
//! rows still waiting are its checkpointed state. On `PROCTIME()` (Flink's processing-time
//! sort) rows are in time order as they arrive: each batch leaves at once, sorted by the
//! other columns.

use super::time_buffer::TimeBuffer;
use arrow::array::RecordBatch;
use arrow::compute::SortOptions;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use weir_common::{CheckpointId, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, StateDistribution, TaskInfo};

struct TemporalSortOperator {
    /// Sort columns; the first is the time, ascending.
    order: Vec<(usize, SortOptions)>,
    processing_time: bool,
    schema: SchemaRef,
    /// Rows ahead of the watermark.
    waiting: TimeBuffer,
}

impl TemporalSortOperator {
    /// `rows` sorted.
    fn sorted(&self, rows: &RecordBatch) -> Result<RecordBatch> {
        let columns: Vec<arrow::compute::SortColumn> = self
            .order
            .iter()
            .map(|(c, options)| arrow::compute::SortColumn {
                values: rows.column(*c).clone(),
                options: Some(*options),
            })
            .collect();
        let indices = arrow::compute::lexsort_to_indices(&columns, None)?;
        Ok(arrow::compute::take_record_batch(rows, &indices)?)
    }

    /// Emits the waiting rows at or before `upto`, sorted.
    fn release(&mut self, upto: i64, out: &mut Output) -> Result<()> {
        let due = self.waiting.take_upto(upto)?;
        if due.is_empty() {
            return Ok(());
        }
        let all = arrow::compute::concat_batches(&self.schema, &due)?;
        out.emit(self.sorted(&all)?);
        Ok(())
    }
}

#[async_trait]
impl Operator for TemporalSortOperator {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        for rows in crate::operators::state::restored_batches(restored)? {
            self.waiting.push(rows)?;
        }
        Ok(())
    }

    async fn process_batch(
        &mut self,
        _: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()> {
        if self.processing_time {
            out.emit(self.sorted(&batch)?);
            return Ok(());
        }
        self.waiting.push_on_time(&batch)?;
        Ok(())
    }

    async fn process_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        if self.waiting.advance(watermark) {
            self.release(watermark, out)?;
        }
        out.emit_watermark(watermark);
        Ok(())
    }

    fn state_bytes(&self) -> usize {
        self.waiting.bytes()
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        let mut state = OperatorState::new(StateDistribution::ToFirst, Vec::new());
        if !self.waiting.is_empty() {
            let all = arrow::compute::concat_batches(&self.schema, self.waiting.batches())?;
            let payload = state.add_payload(weir_state::keyed::encode_batch(&all)?);
            state.items.push(serde_json::json!({ "payload": payload }));
        }
        Ok(state)
    }

    /// A bounded input ends as if the watermark reached the end of time.
    async fn finish(&mut self, out: &mut Output) -> Result<()> {
        self.release(i64::MAX, out)
    }
}

/// Creates the temporal sort's one operator.
pub struct TemporalSortFactory {
    /// Sort columns with their direction; the first is the time, ascending.
    pub order: Vec<(usize, SortOptions)>,
    /// The time is `PROCTIME()`: rows leave as they arrive.
    pub processing_time: bool,
    /// The rows' schema (the input's).
    pub schema: SchemaRef,
}

impl OperatorFactory for TemporalSortFactory {
    fn name(&self) -> String {
        let columns: Vec<String> = self
            .order
            .iter()
            .map(|(c, o)| {
                let name = self.schema.field(*c).name();
                match o.descending {
                    true => format!("{name} DESC"),
                    false => name.clone(),
                }
            })
            .collect();
        format!("TemporalSort(order by {})", columns.join(", "))
    }
    fn create(&self, _: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(TemporalSortOperator {
            order: self.order.clone(),
            processing_time: self.processing_time,
            schema: self.schema.clone(),
            waiting: TimeBuffer::new(self.order[0].0),
        }))
    }
}
