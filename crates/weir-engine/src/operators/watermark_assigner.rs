//! `WatermarkAssigner`: evaluates a table's `WATERMARK FOR c AS expr` on every batch and
//! emits the highest value seen so far whenever it advances (in milliseconds).
//!
//! When the source names its splits (Kafka partitions), the watermark is kept per split
//! and the task's is their minimum, as Flink's per-partition watermarks: a partition read
//! ahead of another does not make the other's rows late. A split holds the watermark back
//! from the moment it is assigned until it has data, unless it is idle — no data for
//! `table.exec.source.idle-timeout` — and stops holding it back when it ends.

use arrow::array::RecordBatch;
use async_trait::async_trait;
use std::collections::HashMap;
use weir_common::{MAX_WATERMARK, Result, now_ms};
use weir_runtime::{Operator, OperatorFactory, Output, SplitId, TaskInfo};
use weir_sql::group_windows::epoch_millis;
use weir_sql::plan::PhysicalExprRef;

struct WatermarkAssigner {
    expr: PhysicalExprRef,
    /// The rowtime column, when the expression reads nothing else: then the watermark
    /// of a batch is the expression on its latest row alone.
    rowtime: Option<usize>,
    current: i64,
    /// Per split: the highest watermark value of its rows (`None`: no rows yet) and when
    /// it last had rows or was assigned (epoch milliseconds).
    splits: HashMap<SplitId, (Option<i64>, u64)>,
    /// `table.exec.source.idle-timeout` in milliseconds.
    idle_ms: Option<u64>,
    /// When the splits' minimum was last taken (epoch milliseconds).
    evaluated_at: u64,
}

impl WatermarkAssigner {
    /// The highest watermark value of `batch`'s rows.
    fn batch_max(&self, batch: &RecordBatch) -> Result<Option<i64>> {
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
        Ok(arrow::compute::max(&epoch_millis(&values)?))
    }

    /// Emits `candidate` if it advances the watermark.
    fn advance(&mut self, candidate: Option<i64>, out: &mut Output) {
        if let Some(m) = candidate
            && m > self.current
        {
            self.current = m;
            out.emit_watermark(m);
        }
    }

    /// The minimum over the splits that are not idle; `None` while one of them has no rows.
    fn splits_minimum(&mut self) -> Option<i64> {
        let now = now_ms();
        self.evaluated_at = now;
        let mut active = self
            .splits
            .values()
            .filter(|(_, seen)| self.idle_ms.is_none_or(|t| now < seen + t))
            .map(|(max, _)| *max)
            .peekable();
        active.peek()?;
        active.try_fold(i64::MAX, |min, max| max.map(|m| min.min(m)))
    }
}

#[async_trait]
impl Operator for WatermarkAssigner {
    async fn process_batch(
        &mut self,
        _: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()> {
        let max = self.batch_max(&batch)?;
        out.emit(batch);
        let Some(split) = out.split().cloned() else {
            self.advance(max, out);
            return Ok(());
        };
        let entry = self.splits.entry(split).or_insert((None, now_ms()));
        entry.0 = entry.0.max(max);
        entry.1 = now_ms();
        let minimum = self.splits_minimum();
        self.advance(minimum, out);
        Ok(())
    }

    async fn splits_changed(
        &mut self,
        added: &[SplitId],
        finished: &[SplitId],
        out: &mut Output,
    ) -> Result<()> {
        for split in added {
            self.splits.entry(split.clone()).or_insert((None, now_ms()));
        }
        for split in finished {
            self.splits.remove(split);
        }
        if !finished.is_empty() {
            let minimum = self.splits_minimum();
            self.advance(minimum, out);
        }
        Ok(())
    }

    /// When the next split that was not idle at the last look goes idle (so that the
    /// others' watermark moves on even if no row comes).
    fn next_timer(&self) -> Option<i64> {
        let idle_ms = self.idle_ms?;
        self.splits
            .values()
            .map(|(_, seen)| seen + idle_ms)
            .filter(|at| *at > self.evaluated_at)
            .min()
            .map(|at| at as i64)
    }

    async fn on_timer(&mut self, _: i64, out: &mut Output) -> Result<()> {
        let minimum = self.splits_minimum();
        self.advance(minimum, out);
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
    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
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
            splits: HashMap::new(),
            idle_ms: task.source_idle_timeout.map(|t| t.as_millis() as u64),
            evaluated_at: 0,
        }))
    }
}
