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
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream, Statistics,
};
use futures::StreamExt;
use std::sync::Arc;
use weir_common::Result;

/// Reads bounded tables for batch mode. The engine implements it with the connectors
/// (this crate does not know them).
#[async_trait]
pub trait BatchScan: Send + Sync + std::fmt::Debug {
    /// The reader of `table`, once it is known that the table can be read in batch mode
    /// (bounded and insert-only); otherwise an error that says why. The source may leave
    /// out rows outside `restrictions` (they are filtered again after the scan), and may
    /// leave NULL the columns of the table's schema outside `projection` (all are read
    /// when `None`).
    async fn open(
        &self,
        table: Arc<TableDef>,
        restrictions: &[Restriction],
        projection: Option<&[usize]>,
    ) -> Result<Arc<dyn TableReader>>;
}

/// A condition of a batch query on a physical integer column of a table, `column = v` or
/// `column IN (v, …)`, that the table's source may use to skip rows
/// (`SourceFactory::restricted`: the nexmark generator makes only the asked-for kinds of
/// event). DataFusion still filters after the scan.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Restriction {
    pub column: String,
    pub values: Vec<i64>,
}

impl Restriction {
    /// The restriction `e` states over a physical column of `table`, if it is one.
    pub fn of(e: &datafusion::logical_expr::Expr, table: &TableDef) -> Option<Restriction> {
        use datafusion::logical_expr::{BinaryExpr, Expr, Operator};
        fn int(e: &Expr) -> Option<i64> {
            match e {
                Expr::Literal(v, _) => match v.cast_to(&arrow::datatypes::DataType::Int64).ok()? {
                    datafusion::common::ScalarValue::Int64(Some(i))
                        if v.data_type().is_integer() =>
                    {
                        Some(i)
                    }
                    _ => None,
                },
                // Not through casts: a narrowing cast changes the value.
                _ => None,
            }
        }
        let column = |e: &Expr| match e {
            Expr::Column(c)
                if table
                    .physical_schema
                    .field_with_name(&c.name)
                    .is_ok_and(|f| f.data_type().is_integer()) =>
            {
                Some(c.name.clone())
            }
            _ => None,
        };
        match e {
            Expr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::Eq,
                right,
            }) => {
                let (c, v) = match (column(left), column(right)) {
                    (Some(c), None) => (c, int(right)?),
                    (None, Some(c)) => (c, int(left)?),
                    _ => return None,
                };
                Some(Restriction {
                    column: c,
                    values: vec![v],
                })
            }
            Expr::InList(list) if !list.negated => Some(Restriction {
                column: column(&list.expr)?,
                values: list.list.iter().map(int).collect::<Option<Vec<_>>>()?,
            }),
            _ => None,
        }
    }
}

/// One bounded table, ready to be read in partitions.
pub trait TableReader: Send + Sync + std::fmt::Debug {
    /// The rows of share `partition` of `partitions` of the table's splits, with its
    /// computed columns (the table's full schema; columns outside the projection the
    /// reader was opened with may be NULL), read when the stream is polled.
    fn scan_partition(
        &self,
        partition: usize,
        partitions: usize,
    ) -> Result<SendableRecordBatchStream>;
    /// How many rows the table holds, if known without reading it.
    fn estimated_rows(&self) -> Option<u64>;
}

/// The scan of one connector table in batch mode.
#[derive(Debug, Clone)]
pub struct SourceScanExec {
    table: Arc<TableDef>,
    reader: Arc<dyn TableReader>,
    /// What the reader was opened with: rows it may leave out.
    restrictions: Vec<Restriction>,
    /// Columns of the table's full schema to return (all when `None`).
    projection: Option<Vec<usize>>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl SourceScanExec {
    /// Scans `table` through `reader` (opened with `restrictions`) in `partitions`
    /// partitions, returning the columns `projection`.
    pub fn try_new(
        table: Arc<TableDef>,
        reader: Arc<dyn TableReader>,
        restrictions: Vec<Restriction>,
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
            restrictions,
            projection: projection.cloned(),
            schema,
            properties,
        })
    }
}

impl SourceScanExec {
    /// The table scanned.
    pub fn table(&self) -> &Arc<TableDef> {
        &self.table
    }

    /// The restrictions the reader was opened with.
    pub fn restrictions(&self) -> &[Restriction] {
        &self.restrictions
    }

    /// The columns of the table's full schema returned (all when `None`).
    pub fn projection(&self) -> Option<&Vec<usize>> {
        self.projection.as_ref()
    }

    /// How many partitions the scan has.
    pub fn partitions(&self) -> usize {
        self.properties.partitioning.partition_count()
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

    /// The connector's row count when it knows it (DataFusion's join selection builds
    /// hash tables on the smaller input), spread evenly over the partitions.
    fn statistics_from_inputs(
        &self,
        _: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> datafusion::error::Result<Arc<Statistics>> {
        use datafusion::common::stats::Precision;
        let mut stats = Statistics::new_unknown(&self.schema);
        if let Some(rows) = self.reader.estimated_rows() {
            let partitions = self.properties.partitioning.partition_count() as u64;
            let rows = match args.partition() {
                Some(_) => rows.div_ceil(partitions.max(1)),
                None => rows,
            };
            stats.num_rows = Precision::Inexact(rows as usize);
        }
        Ok(Arc::new(stats))
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
