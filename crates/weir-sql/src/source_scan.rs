//! Batch mode's scan of a connector table: a DataFusion `ExecutionPlan` with one partition
//! per share of the source's splits, each reading its share lazily, a batch at a time,
//! through the connector (as a streaming subtask would), so DataFusion's operators start
//! on the first rows and nothing holds the whole table.

use crate::catalog::TableDef;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use futures::StreamExt;
use std::sync::Arc;
use weir_common::Result;

/// Reads bounded tables for batch mode. The engine implements it with the connectors
/// (this crate does not know them).
#[async_trait]
pub trait BatchScan: Send + Sync + std::fmt::Debug {
    /// The reader of `table`, once it is known that the table can be read in batch mode
    /// (bounded and insert-only); otherwise an error that says why.
    async fn open(&self, table: Arc<TableDef>) -> Result<Arc<dyn TableReader>>;
}

/// One bounded table, ready to be read in partitions.
pub trait TableReader: Send + Sync + std::fmt::Debug {
    /// The rows of share `partition` of `partitions` of the table's splits, with its
    /// computed columns (the table's full schema), read when the stream is polled.
    fn scan_partition(
        &self,
        partition: usize,
        partitions: usize,
    ) -> Result<SendableRecordBatchStream>;
}

/// The scan of one connector table in batch mode.
#[derive(Debug)]
pub struct SourceScanExec {
    table: Arc<TableDef>,
    reader: Arc<dyn TableReader>,
    /// Columns of the table's full schema to return (all when `None`).
    projection: Option<Vec<usize>>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl SourceScanExec {
    /// Scans `table` through `reader` in `partitions` partitions, returning the columns
    /// `projection`.
    pub fn try_new(
        table: Arc<TableDef>,
        reader: Arc<dyn TableReader>,
        projection: Option<&Vec<usize>>,
        partitions: usize,
    ) -> Result<Self> {
        let schema = match projection {
            Some(p) => Arc::new(table.schema.project(p)?),
            None => table.schema.clone(),
        };
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(partitions.max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(Self {
            table,
            reader,
            projection: projection.cloned(),
            schema,
            properties,
        })
    }
}

impl DisplayAs for SourceScanExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "SourceScanExec: table={}, connector={}",
            self.table.name,
            self.table.options.get("connector").unwrap_or_default()
        )
    }
}

impl ExecutionPlan for SourceScanExec {
    fn name(&self) -> &str {
        "SourceScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn apply_expressions(
        &self,
        _: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> datafusion::error::Result<TreeNodeRecursion>,
    ) -> datafusion::error::Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn with_new_children(
        self: Arc<Self>,
        _: Vec<Arc<dyn ExecutionPlan>>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        _: Arc<TaskContext>,
    ) -> datafusion::error::Result<SendableRecordBatchStream> {
        let partitions = self.properties.partitioning.partition_count();
        let rows = self
            .reader
            .scan_partition(partition, partitions)
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        let Some(projection) = self.projection.clone() else {
            return Ok(rows);
        };
        let projected = rows.map(move |batch| Ok(batch?.project(&projection)?));
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            projected,
        )))
    }
}
