//! `Calc`: fused filters and projections evaluated with DataFusion physical expressions.
//! Over a changelog, rows keep their kinds.

use arrow::array::{AsArray, RecordBatch, RecordBatchOptions};
use async_trait::async_trait;
use weir_common::{Error, Result, changelog};
use weir_runtime::{Operator, OperatorFactory, Output, TaskInfo};
use weir_sql::CalcStep;

/// Applies filters and projections to every batch.
pub struct CalcOperator {
    steps: Vec<CalcStep>,
}

impl CalcOperator {
    /// An operator applying `steps` in order.
    pub fn new(steps: Vec<CalcStep>) -> Self {
        Self { steps }
    }

    /// Applies every step; `None` when no row is left.
    pub fn apply(&self, batch: RecordBatch) -> Result<Option<RecordBatch>> {
        let mut batch = batch;
        for step in &self.steps {
            match step {
                CalcStep::Filter(predicate) => {
                    let mask = predicate.evaluate(&batch)?.into_array(batch.num_rows())?;
                    let mask = mask
                        .as_boolean_opt()
                        .ok_or_else(|| Error::internal("filter predicate is not boolean"))?;
                    batch = arrow::compute::filter_record_batch(&batch, mask)?;
                    if batch.num_rows() == 0 {
                        return Ok(None);
                    }
                }
                CalcStep::Project { exprs, schema } => {
                    let rows = batch.num_rows();
                    let mut columns = exprs
                        .iter()
                        .map(|e| e.evaluate(&batch).and_then(|v| v.into_array(rows)))
                        .collect::<Result<Vec<_>, _>>()?;
                    let options = RecordBatchOptions::new().with_row_count(Some(rows));
                    // A changelog keeps its row kinds (the last column) through projections;
                    // filters keep them already.
                    let schema = if changelog::is_changelog(&batch) {
                        columns.push(batch.column(batch.num_columns() - 1).clone());
                        changelog::with_op_field(schema)
                    } else {
                        schema.clone()
                    };
                    batch = RecordBatch::try_new_with_options(schema, columns, &options)?;
                }
            }
        }
        Ok(Some(batch))
    }
}

#[async_trait]
impl Operator for CalcOperator {
    async fn process_batch(
        &mut self,
        _: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()> {
        if let Some(b) = self.apply(batch)? {
            out.emit(b);
        }
        Ok(())
    }
}

/// Creates [`CalcOperator`]s.
pub struct CalcOperatorFactory {
    /// The fused steps.
    pub steps: Vec<CalcStep>,
    /// Name shown by EXPLAIN.
    pub label: String,
}

impl OperatorFactory for CalcOperatorFactory {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn create(&self, _: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(CalcOperator::new(self.steps.clone())))
    }
}
