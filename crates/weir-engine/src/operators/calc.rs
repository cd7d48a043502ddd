//! `Calc`: fused filters and projections evaluated with DataFusion physical expressions.
//! Over a changelog, rows keep their kinds.

use arrow::array::{AsArray, RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::physical_expr::PhysicalExprRef;
use std::sync::Arc;
use weir_common::{Error, Result, changelog};
use weir_runtime::{Operator, OperatorFactory, Output, TaskInfo};
use weir_sql::current_watermark::{self, WatermarkCell};
use weir_sql::{CalcStep, UnnestStep};

/// Applies filters and projections to every batch.
pub struct CalcOperator {
    steps: Vec<CalcStep>,
    /// The watermark `CURRENT_WATERMARK` calls in the steps read, when there are any.
    watermark: Option<Arc<WatermarkCell>>,
}

impl CalcOperator {
    /// An operator applying `steps` in order.
    pub fn new(steps: Vec<CalcStep>) -> Self {
        Self {
            steps,
            watermark: None,
        }
    }

    /// An operator applying `steps` whose `CURRENT_WATERMARK` calls read the watermarks
    /// this operator receives.
    pub fn with_watermark(steps: &[CalcStep]) -> Result<Self> {
        if !steps
            .iter()
            .flat_map(CalcStep::exprs)
            .any(current_watermark::mentions)
        {
            return Ok(Self::new(steps.to_vec()));
        }
        let cell = Arc::new(WatermarkCell::default());
        let bind = |e| current_watermark::bind(e, &cell);
        let steps = steps
            .iter()
            .map(|s| {
                Ok(match s {
                    CalcStep::Filter(e) => CalcStep::Filter(bind(e)?),
                    CalcStep::Project { exprs, schema } => CalcStep::Project {
                        exprs: exprs.iter().map(bind).collect::<Result<_, _>>()?,
                        schema: schema.clone(),
                    },
                    CalcStep::Unnest(u) => CalcStep::Unnest(u.clone()),
                    CalcStep::Expand(e) => CalcStep::Expand(weir_sql::ExpandStep {
                        exprs: e.exprs.iter().map(bind).collect::<Result<_, _>>()?,
                        schema: e.schema.clone(),
                    }),
                })
            })
            .collect::<Result<Vec<_>, datafusion::error::DataFusionError>>()?;
        Ok(Self {
            steps,
            watermark: Some(cell),
        })
    }

    /// Applies every step; `None` when no row is left.
    pub fn apply(&self, batch: RecordBatch) -> Result<Option<RecordBatch>> {
        let mut batch = batch;
        for step in &self.steps {
            match step {
                CalcStep::Filter(predicate) => {
                    let mask = predicate
                        .evaluate(&batch)
                        .and_then(|v| v.into_array(batch.num_rows()))
                        .map_err(|e| {
                            Error::Input(format!(
                                "cannot evaluate the condition {}: {}",
                                readable(predicate),
                                root_cause(e)
                            ))
                        })?;
                    let mask = mask
                        .as_boolean_opt()
                        .ok_or_else(|| Error::internal("filter predicate is not boolean"))?;
                    batch = arrow::compute::filter_record_batch(&batch, mask)?;
                    if batch.num_rows() == 0 {
                        return Ok(None);
                    }
                }
                CalcStep::Project { exprs, schema } => batch = project(exprs, schema, &batch)?,
                CalcStep::Expand(e) => {
                    let copies = e
                        .projections()
                        .map(|p| project(p, &e.schema, &batch))
                        .collect::<Result<Vec<_>>>()?;
                    let schema = match copies.first() {
                        Some(first) => first.schema(),
                        None => return Ok(None),
                    };
                    batch = arrow::compute::concat_batches(&schema, &copies)?;
                }
                CalcStep::Unnest(u) => {
                    batch = unnest(u, batch)?;
                    if batch.num_rows() == 0 {
                        return Ok(None);
                    }
                }
            }
        }
        Ok(Some(batch))
    }
}

/// The columns `exprs` (named by `schema`) of `batch`. A changelog keeps its row kinds
/// (the last column) through projections; filters keep them already.
fn project(
    exprs: &[PhysicalExprRef],
    schema: &SchemaRef,
    batch: &RecordBatch,
) -> Result<RecordBatch> {
    let rows = batch.num_rows();
    let mut columns = exprs
        .iter()
        .zip(schema.fields())
        .map(|(e, field)| {
            e.evaluate(batch)
                .and_then(|v| v.into_array(rows))
                .map_err(|err| {
                    Error::Input(format!(
                        "cannot compute column '{}' = {}: {}",
                        field.name(),
                        readable(e),
                        root_cause(err)
                    ))
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    let schema = if changelog::is_changelog(batch) {
        columns.push(batch.column(batch.num_columns() - 1).clone());
        changelog::with_op_field(schema)
    } else {
        schema.clone()
    };
    Ok(RecordBatch::try_new_with_options(
        schema, columns, &options,
    )?)
}

/// Runs DataFusion's `UnnestExec` over one batch. A changelog's row kinds (its last
/// column) are repeated like any column that is not unnested.
fn unnest(step: &UnnestStep, batch: RecordBatch) -> Result<RecordBatch> {
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::physical_plan::ExecutionPlan;
    use datafusion::physical_plan::unnest::UnnestExec;
    use futures::{FutureExt, TryStreamExt};
    let schema = match changelog::is_changelog(&batch) {
        true => changelog::with_op_field(&step.schema),
        false => step.schema.clone(),
    };
    let input = MemorySourceConfig::try_new_exec(&[vec![batch.clone()]], batch.schema(), None)?;
    let exec = UnnestExec::new(
        input,
        step.lists.clone(),
        step.structs.clone(),
        schema.clone(),
        step.options.clone(),
    )?;
    // One context for every batch (a default one builds a runtime environment).
    static CONTEXT: std::sync::OnceLock<Arc<datafusion::execution::TaskContext>> =
        std::sync::OnceLock::new();
    let context = CONTEXT.get_or_init(|| Arc::new(datafusion::execution::TaskContext::default()));
    let rows = exec.execute(0, context.clone())?;
    // Both the in-memory input and the unnest compute without waiting.
    let batches: Vec<RecordBatch> = rows
        .try_collect()
        .now_or_never()
        .ok_or_else(|| Error::internal("unnest waited for its in-memory input"))??;
    Ok(arrow::compute::concat_batches(&schema, &batches)?)
}

/// A physical expression as SQL-ish text: `CAST(s@1 AS Int32)` → `CAST(s AS Int32)`.
fn readable(e: &std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>) -> String {
    let text = e.to_string();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '@' && chars.peek().is_some_and(|d| d.is_ascii_digit()) {
            while chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                chars.next();
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The innermost message of a DataFusion error ("Cannot cast string 'x' to value of Int32
/// type", "division by zero"), without the wrappers that repeat it.
fn root_cause(e: datafusion::error::DataFusionError) -> String {
    weir_sql::planner::row_error_message(&e).unwrap_or_else(|| match e.find_root() {
        datafusion::error::DataFusionError::ArrowError(a, _) => a.to_string(),
        other => other.to_string(),
    })
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

    async fn process_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        if let Some(cell) = &self.watermark {
            cell.set(watermark);
        }
        out.emit_watermark(watermark);
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
        Ok(Box::new(CalcOperator::with_watermark(&self.steps)?))
    }
}
