//! `WatermarkAssigner`: evaluates a table's `WATERMARK FOR c AS expr` on every batch and
//! emits the highest value seen so far whenever it advances (in milliseconds).

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{DataType, Int64Type, TimeUnit};
use async_trait::async_trait;
use weir_common::{MAX_WATERMARK, Result};
use weir_runtime::{Operator, OperatorFactory, Output, TaskInfo};
use weir_sql::plan::PhysicalExprRef;

struct WatermarkAssigner {
    expr: PhysicalExprRef,
    current: i64,
}

#[async_trait]
impl Operator for WatermarkAssigner {
    async fn process_batch(
        &mut self,
        _: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()> {
        let values = self.expr.evaluate(&batch)?.into_array(batch.num_rows())?;
        let ms = arrow::compute::cast(&values, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
        let ms = arrow::compute::cast(&ms, &DataType::Int64)?;
        let max = arrow::compute::max(ms.as_primitive::<Int64Type>());
        out.emit(batch);
        if let Some(m) = max {
            if m > self.current {
                self.current = m;
                out.emit_watermark(m);
            }
        }
        Ok(())
    }

    async fn process_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        // Only the end-of-input watermark passes; the assigner owns event time here.
        if watermark == MAX_WATERMARK {
            self.current = MAX_WATERMARK;
            out.emit_watermark(watermark);
        }
        Ok(())
    }
}

/// Creates watermark assigners.
pub struct WatermarkAssignerFactory {
    /// The `WATERMARK FOR … AS expr` expression over the table's columns.
    pub expr: PhysicalExprRef,
}

impl OperatorFactory for WatermarkAssignerFactory {
    fn name(&self) -> String {
        format!("WatermarkAssigner({})", self.expr)
    }
    fn create(&self, _: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(WatermarkAssigner {
            expr: self.expr.clone(),
            current: i64::MIN,
        }))
    }
}
