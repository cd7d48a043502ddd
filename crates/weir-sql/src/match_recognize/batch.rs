//! `MATCH_RECOGNIZE` in batch mode: the clause's input read whole, its rows put in time
//! order (rows at one time in the order they were read) and run through the same
//! [`Matcher`] as the streaming operator. A bounded input has no late rows.

use super::MatchProgram;
use super::matcher::Matcher;
use arrow::array::{RecordBatch, UInt32Array};
use arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use std::sync::Arc;

/// Rows offered to the matcher at a time.
const CHUNK_ROWS: usize = 8192;

#[derive(Debug)]
pub struct MatchExec {
    input: Arc<dyn ExecutionPlan>,
    program: Arc<MatchProgram>,
    /// Output columns to return (all when `None`).
    projection: Option<Vec<usize>>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl MatchExec {
    pub fn try_new(
        input: Arc<dyn ExecutionPlan>,
        program: Arc<MatchProgram>,
        projection: Option<&Vec<usize>>,
    ) -> Result<Self> {
        let schema = match projection {
            Some(p) => Arc::new(program.schema.project(p)?),
            None => program.schema.clone(),
        };
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Ok(Self {
            input,
            program,
            projection: projection.cloned(),
            schema,
            properties,
        })
    }
}

impl DisplayAs for MatchExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "MatchRecognizeExec: {}", self.program.describe())
    }
}

impl ExecutionPlan for MatchExec {
    fn name(&self) -> &str {
        "MatchRecognizeExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn apply_expressions(
        &self,
        _: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = children.into_iter().next().ok_or_else(|| {
            DataFusionError::Internal("MatchRecognizeExec takes one input".into())
        })?;
        Ok(Arc::new(MatchExec::try_new(
            input,
            self.program.clone(),
            self.projection.as_ref(),
        )?))
    }

    fn execute(&self, _: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let (input, program) = (self.input.clone(), self.program.clone());
        let projection = self.projection.clone();
        let rows = futures::stream::once(async move {
            let batches = datafusion::physical_plan::collect(input.clone(), context).await?;
            let all = arrow::compute::concat_batches(&input.schema(), &batches)?;
            let matches =
                run(program.clone(), &all).map_err(|e| DataFusionError::External(Box::new(e)))?;
            let matches = arrow::compute::concat_batches(&program.schema, &matches)?;
            Ok(match &projection {
                Some(p) => matches.project(p)?,
                None => matches,
            })
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            rows,
        )))
    }
}

/// The matches of `rows` (any order; NULL times are skipped, as a stream drops them).
fn run(program: Arc<MatchProgram>, rows: &RecordBatch) -> weir_common::Result<Vec<RecordBatch>> {
    let times = crate::group_windows::epoch_millis(rows.column(program.time))?;
    let mut order: Vec<u32> = (0..rows.num_rows() as u32).collect();
    // Stable: rows at one time keep the order they were read in.
    order.sort_by_key(|i| times.value(*i as usize));
    let mut matcher = Matcher::new(program)?;
    let mut out = Vec::new();
    for chunk in order.chunks(CHUNK_ROWS) {
        let taken = arrow::compute::take_record_batch(rows, &UInt32Array::from(chunk.to_vec()))?;
        out.extend(matcher.process(&taken)?);
    }
    Ok(out)
}
