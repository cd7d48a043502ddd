//! A Weir scan that each Ballista task reads its own share of.
//!
//! Ballista's scheduler gives a task a slice of a stage's partitions and cuts the
//! stage's leaves down to that slice before sending the plan, but only the leaves it
//! knows (shuffle readers, file and in-memory sources): the executor then runs every
//! partition the leaf still has. A [`SourceScanExec`] is not one of them, so every task
//! of a stage read the whole table and the rows came back once per task (Nexmark
//! counts doubled on two one-slot executors).
//!
//! The scheduler's physical planner therefore puts each scan above an in-memory source
//! of one row per partition, its partition number ([`TaskScanExec`], placed by the
//! [`ScanPerTask`] rule). The scheduler cuts that source as it cuts any in-memory
//! source; an executor reads the partitions whose numbers reach it, out of the scan's
//! full count, so the tasks of a stage read each split once between them. A scan under
//! an operator that reads all of its input in one task (a `CoalescePartitionsExec`, a
//! join's build side) keeps every number, as Ballista keeps such leaves whole.

use datafusion::arrow::array::{AsArray, RecordBatch, UInt32Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, UInt32Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Statistics};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use futures::{StreamExt, TryStreamExt};
use std::sync::Arc;
use weir_sql::source_scan::SourceScanExec;

type DfResult<T> = datafusion::error::Result<T>;

/// A [`SourceScanExec`] whose partitions are chosen by its input: for each partition
/// number its input yields, it returns that partition of the scan.
#[derive(Debug)]
pub struct TaskScanExec {
    scan: Arc<SourceScanExec>,
    /// One `UInt32` row per partition of the scan to read, as Ballista left it.
    numbers: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl TaskScanExec {
    /// `scan`, its partitions read as `numbers` yields them.
    pub fn new(scan: Arc<SourceScanExec>, numbers: Arc<dyn ExecutionPlan>) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(scan.schema()),
            Partitioning::UnknownPartitioning(numbers.properties().partitioning.partition_count()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Self {
            scan,
            numbers,
            properties,
        }
    }

    /// `scan` with every partition: partition `i` reads the scan's partition `i`.
    pub fn over(scan: Arc<SourceScanExec>) -> DfResult<Self> {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "partition",
            DataType::UInt32,
            false,
        )]));
        let partitions = (0..scan.partitions())
            .map(|i| {
                let number = UInt32Array::from(vec![i as u32]);
                Ok(vec![RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(number)],
                )?])
            })
            .collect::<DfResult<Vec<_>>>()?;
        let numbers = MemorySourceConfig::try_new_exec(&partitions, schema, None)?;
        Ok(Self::new(scan, numbers))
    }

    /// The scan, with its full partition count.
    pub fn scan(&self) -> &Arc<SourceScanExec> {
        &self.scan
    }
}

impl DisplayAs for TaskScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "TaskScanExec: of {} partitions, ",
            self.scan.partitions()
        )?;
        self.scan.fmt_as(t, f)
    }
}

impl ExecutionPlan for TaskScanExec {
    fn name(&self) -> &str {
        "TaskScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn apply_expressions(
        &self,
        _: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.numbers]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn statistics_from_inputs(
        &self,
        _: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> DfResult<Arc<Statistics>> {
        // A partition holds a share of the scan's rows, as one of the scan's does.
        self.scan.statistics_from_inputs(&[], args)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let [numbers] = <[_; 1]>::try_from(children).map_err(|c| {
            DataFusionError::Internal(format!("TaskScanExec has one input, not {}", c.len()))
        })?;
        Ok(Arc::new(Self::new(self.scan.clone(), numbers)))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let numbers = self.numbers.execute(partition, context.clone())?;
        let scan = self.scan.clone();
        let rows = numbers
            .map(move |batch| {
                let batch = batch?;
                let Some(numbers) = batch.column(0).as_primitive_opt::<UInt32Type>() else {
                    return Err(DataFusionError::Internal(
                        "TaskScanExec's input is not a column of partition numbers".into(),
                    ));
                };
                let streams = numbers
                    .values()
                    .iter()
                    .map(|&n| {
                        let n = n as usize;
                        if n >= scan.partitions() {
                            return Err(DataFusionError::Internal(format!(
                                "partition {n} of a scan of {} partitions",
                                scan.partitions()
                            )));
                        }
                        scan.execute(n, context.clone())
                    })
                    .collect::<DfResult<Vec<_>>>()?;
                Ok(futures::stream::iter(streams).flatten())
            })
            .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.scan.schema(),
            rows,
        )))
    }
}

/// The scheduler's last physical optimizer rule: every [`SourceScanExec`] becomes a
/// [`TaskScanExec`] over all of its partitions.
#[derive(Debug, Default)]
pub struct ScanPerTask;

impl PhysicalOptimizerRule for ScanPerTask {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(scan) = node.downcast_ref::<SourceScanExec>() else {
                return Ok(Transformed::no(node));
            };
            let scan = Arc::new(scan.clone());
            Ok(Transformed::yes(
                Arc::new(TaskScanExec::over(scan)?) as Arc<dyn ExecutionPlan>
            ))
        })
        .data()
    }

    fn name(&self) -> &str {
        "weir_scan_per_task"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
