//! `WatermarkAssigner`: evaluates a table's `WATERMARK FOR c AS expr` on every batch and
//! emits the highest value seen so far whenever it advances (in milliseconds).

use arrow::array::RecordBatch;
use async_trait::async_trait;
use weir_common::{MAX_WATERMARK, Result};
use weir_runtime::{Operator, OperatorFactory, Output, TaskInfo};
use weir_sql::group_windows::epoch_millis;
use weir_sql::plan::PhysicalExprRef;

struct WatermarkAssigner {
    expr: PhysicalExprRef,
    /// The rowtime column, when the expression reads nothing else: then the watermark
    /// of a batch is the expression on its latest row alone.
    rowtime: Option<usize>,
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
        let input = match self.rowtime {
            // `ts - INTERVAL …` grows with `ts`: evaluate it on the latest row only.
            Some(c) => {
                let latest = epoch_millis(batch.column(c))?
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| v.map(|v| (v, i)))
                    .max();
                match latest {
                    Some((_, i)) => batch.slice(i, 1),
                    None => batch.slice(0, 0),
                }
            }
            None => batch.clone(),
        };
        let values = self.expr.evaluate(&input)?.into_array(input.num_rows())?;
        let max = arrow::compute::max(&epoch_millis(&values)?);
        out.emit(batch);
        if let Some(m) = max
            && m > self.current
        {
            self.current = m;
            out.emit_watermark(m);
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
    /// Position of the rowtime column (`WATERMARK FOR c`) in the table's columns.
    pub rowtime: usize,
}

impl OperatorFactory for WatermarkAssignerFactory {
    fn name(&self) -> String {
        format!("WatermarkAssigner({})", self.expr)
    }
    fn create(&self, _: &TaskInfo) -> Result<Box<dyn Operator>> {
        // Only an expression of the rowtime column alone may be evaluated on one row.
        let mut columns = Vec::new();
        let _ = datafusion::common::tree_node::TreeNode::apply(&self.expr, |e| {
            if let Some(c) = e.downcast_ref::<datafusion::physical_expr::expressions::Column>() {
                columns.push(c.index());
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        });
        let only_rowtime = !columns.is_empty() && columns.iter().all(|c| *c == self.rowtime);
        Ok(Box::new(WatermarkAssigner {
            expr: self.expr.clone(),
            rowtime: only_rowtime.then_some(self.rowtime),
            current: i64::MIN,
        }))
    }
}
