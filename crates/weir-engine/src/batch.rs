//! Batch mode: a bounded query runs on DataFusion's own physical execution (all cores),
//! reading each table through its connector a partition and a batch at a time, and its
//! result is streamed into the same two-phase-commit sinks as in streaming mode,
//! committed once at the end.

use crate::operators::CalcOperator;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::{StreamExt, TryStreamExt};
use std::sync::Arc;
use weir_common::{CheckpointId, Error, JobId, Result};
use weir_runtime::{JobMetrics, Output, SourcePoll, StreamItem, TaskInfo};
use weir_sql::source_scan::{Restriction, TableReader};
use weir_sql::{BatchScan, CalcStep, Planner, TableDef, computed_physical};

/// A planned batch query: `INSERT INTO sink …` or a `SELECT` to show.
#[derive(Debug)]
pub struct BatchQuery {
    /// DataFusion's optimized plan of the query.
    pub logical: LogicalPlan,
    /// The table an `INSERT` writes; `None` for a `SELECT`.
    pub sink: Option<Arc<TableDef>>,
    /// `INSERT OVERWRITE`: the files the table held before (in the partitions written)
    /// are deleted once the new ones are committed.
    pub overwrite: bool,
}

/// What a batch query produced.
#[derive(Debug)]
pub enum BatchResult {
    /// Rows of a `SELECT`.
    Rows(Vec<RecordBatch>),
    /// Rows committed into the sink of an `INSERT`.
    Written(u64),
}

/// A task of its own for a batch job's sink (and for operator unit tests).
pub(crate) fn task(name: &str) -> TaskInfo {
    let job_id = JobId::new();
    TaskInfo {
        job_id,
        attempt: uuid::Uuid::new_v4(),
        lineage: job_id.to_string(),
        job_fingerprint: 0,
        fence: Default::default(),
        vertex_uid: format!("batch-{name}"),
        vertex_name: name.to_string(),
        subtask: 0,
        parallelism: 1,
        max_parallelism: 128,
        metrics: Arc::new(JobMetrics::default()),
        source_idle_timeout: None,
        incremental_checkpoints: false,
        checkpoint_requests: Default::default(),
    }
}

/// Reads bounded tables through their connectors.
#[derive(Debug)]
pub struct ConnectorBatchScan;

#[async_trait]
impl BatchScan for ConnectorBatchScan {
    async fn open(
        &self,
        table: Arc<TableDef>,
        restrictions: &[Restriction],
        projection: Option<&[usize]>,
    ) -> Result<Arc<dyn TableReader>> {
        if weir_common::changelog::is_changelog_source(&table.options) {
            let why = match table.options.get("connector") {
                Some("upsert-kafka") => "connector 'upsert-kafka'".to_string(),
                _ => format!(
                    "format '{}'",
                    (table.options.get("format"))
                        .or(table.options.get("value.format"))
                        .unwrap_or_default()
                ),
            };
            return Err(Error::plan(format!(
                "table '{}' is read as a changelog ({why}); batch mode reads insert-only \
                 tables, as Flink's does: run it in streaming mode",
                table.name
            )));
        }
        let mut factory = weir_connectors::create_source(
            &table.options,
            table.physical_schema.clone(),
            &table.metadata_keys(),
            &table.primary_key,
        )
        .await?;
        for r in restrictions {
            if let Some(restricted) = factory.restricted(&r.column, &r.values) {
                factory = restricted;
            }
        }
        // The computed columns the query reads, and the physical columns they and the
        // query read: the source may leave the others NULL.
        let mut computed = computed_physical(&table)?;
        if let Some(projection) = projection {
            let mut used = Vec::new();
            match &mut computed {
                Some(exprs) => {
                    for (c, e) in exprs.iter_mut().enumerate() {
                        if projection.contains(&c) {
                            used.extend(
                                datafusion::physical_expr::utils::collect_columns(e)
                                    .iter()
                                    .map(|col| col.index()),
                            );
                        } else {
                            *e = Arc::new(datafusion::physical_expr::expressions::Literal::new(
                                datafusion::common::ScalarValue::try_from(
                                    table.schema.field(c).data_type(),
                                )?,
                            ));
                        }
                    }
                }
                None => used.extend_from_slice(projection),
            }
            if let Some(projected) = factory.projected(&used) {
                factory = projected;
            }
        }
        if !factory.is_bounded() {
            return Err(Error::plan(format!(
                "table '{}' is unbounded; batch mode reads bounded tables only (set 'number-of-rows' \
                 or a sequence end, remove 'source.monitor-interval', or run in streaming mode)",
                table.name
            )));
        }
        Ok(Arc::new(ConnectorTable {
            table,
            factory,
            computed,
        }))
    }
}

/// A bounded table and its connector's source factory, created once per scan.
struct ConnectorTable {
    table: Arc<TableDef>,
    factory: Arc<dyn weir_runtime::SourceFactory>,
    /// The table's columns over its physical ones, when it has computed columns (NULL
    /// for those the query does not read).
    computed: Option<Vec<datafusion::physical_expr::PhysicalExprRef>>,
}

impl std::fmt::Debug for ConnectorTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.table.name, self.factory.name())
    }
}

impl TableReader for ConnectorTable {
    fn estimated_rows(&self) -> Option<u64> {
        self.factory.estimated_rows()
    }

    fn scan_partition(
        &self,
        partition: usize,
        partitions: usize,
    ) -> Result<SendableRecordBatchStream> {
        let (table, factory) = (self.table.clone(), self.factory.clone());
        let schema = table.schema.clone();
        let calc = self.computed.clone().map(|exprs| {
            CalcOperator::new(vec![CalcStep::Project {
                exprs,
                schema: table.schema.clone(),
            }])
        });
        // The source runs as subtask `partition` of `partitions` would in streaming mode:
        // it reads that share of the splits.
        let opened = async move {
            let mut task = task(&table.name);
            task.subtask = partition;
            task.parallelism = partitions;
            let mut source = factory.create(&task, None)?;
            source.open().await?;
            let reading = Reading {
                source,
                calc,
                pending: std::collections::VecDeque::new(),
            };
            Ok::<_, Error>(futures::stream::try_unfold(reading, Reading::next))
        };
        let rows = futures::stream::once(opened)
            .try_flatten()
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)));
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, rows)))
    }
}

/// One partition of a batch scan being read.
struct Reading {
    source: Box<dyn weir_runtime::Source>,
    calc: Option<CalcOperator>,
    /// Batches polled and not yet returned.
    pending: std::collections::VecDeque<RecordBatch>,
}

impl Reading {
    /// The next batch, with the table's computed columns; `None` once the source is done.
    async fn next(mut self) -> Result<Option<(RecordBatch, Self)>> {
        loop {
            if let Some(batch) = self.pending.pop_front() {
                return Ok(Some((batch, self)));
            }
            let polled = match self.source.poll_next().await? {
                SourcePoll::Batch(b) => vec![b],
                SourcePoll::Splits { batches, .. } => batches.into_iter().map(|(_, b)| b).collect(),
                SourcePoll::Idle(d) => {
                    tokio::time::sleep(d).await;
                    continue;
                }
                SourcePoll::Finished => {
                    self.source.close().await?;
                    return Ok(None);
                }
            };
            for b in polled {
                match &self.calc {
                    Some(c) => self.pending.extend(c.apply(b)?),
                    None => self.pending.push_back(b),
                }
            }
        }
    }
}

/// Casts `batch` to `schema` by position.
fn conform(batch: &RecordBatch, schema: &SchemaRef, table: &str) -> Result<RecordBatch> {
    if batch.num_columns() != schema.fields().len() {
        return Err(Error::plan(format!(
            "INSERT INTO '{table}': the query returns {} columns, the table has {}",
            batch.num_columns(),
            schema.fields().len()
        )));
    }
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| arrow::compute::cast(c, f.data_type()))
        .collect::<Result<Vec<_>, _>>()?;
    let relaxed = Arc::new(arrow::datatypes::Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    Ok(RecordBatch::try_new(relaxed, columns)?)
}

/// Runs one batch query.
pub async fn run(planner: &Planner, query: &BatchQuery) -> Result<BatchResult> {
    let Some(table) = &query.sink else {
        return Ok(BatchResult::Rows(
            planner.execute_batch(query.logical.clone()).await?,
        ));
    };
    let schema = table.sink_schema.clone();
    let sink = weir_connectors::create_sink(
        &table.options,
        schema.clone(),
        &table.partitioned_by,
        &table.primary_key,
        &table.sink_metadata_keys(),
        None,
        query.overwrite,
    )
    .await?;
    // A sink that commits in one place (a Delta table) overwrites in its commit;
    // otherwise what the table holds before anything is written is replaced afterwards.
    let committer = sink.global_committer();
    let before = match query.overwrite && committer.is_none() {
        true => Some(weir_connectors::filesystem::overwrite::Snapshot::take(&table.options).await?),
        false => None,
    };
    let writer = task(&table.name);
    let mut op = sink.create(&writer)?;
    op.open(None).await?;
    let mut out = Output::default();
    let mut rows = 0;
    let mut batches = planner.execute_batch_each(query.logical.clone()).await?;
    while let Some(b) = batches.next().await {
        let b = conform(&b?, &schema, &table.name)?;
        rows += b.num_rows() as u64;
        op.process_batch(0, b, &mut out).await?;
    }
    // One commit at the end, through the same two-phase protocol as a final checkpoint.
    let last = CheckpointId(1);
    op.end_input(0, &mut out).await?;
    op.finish(&mut out).await?;
    op.prepare_snapshot_pre_barrier(last, &mut out).await?;
    op.snapshot_state(last)?;
    match committer {
        // The writer sent its committables; the committer commits them once.
        Some(committer) => {
            let mut c = committer.create(&TaskInfo {
                vertex_uid: weir_runtime::committer_uid(&writer.vertex_uid),
                ..writer.clone()
            })?;
            c.open(None).await?;
            let mut none = Output::default();
            for item in out.take() {
                if let StreamItem::Batch(b) = item {
                    c.process_batch(0, b, &mut none).await?;
                }
            }
            c.snapshot_state(last)?;
            c.notify_checkpoint_complete(last).await?;
            c.close().await?;
        }
        None => op.notify_checkpoint_complete(last).await?,
    }
    op.close().await?;
    if let Some(before) = before {
        before
            .replace(&table.options, !table.partitioned_by.is_empty())
            .await?;
    }
    Ok(BatchResult::Written(rows))
}
