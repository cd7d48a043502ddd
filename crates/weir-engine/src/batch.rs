//! Batch mode: a bounded query runs on DataFusion's own physical execution (all cores),
//! reading each table whole through its connector, and its result is written through the
//! same two-phase-commit sinks as in streaming mode, committed once at the end.

use crate::operators::CalcOperator;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::logical_expr::LogicalPlan;
use std::sync::Arc;
use weir_common::{CheckpointId, Error, JobId, Result};
use weir_runtime::{JobMetrics, Output, SourcePoll, TaskInfo};
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
        checkpoint_requests: Default::default(),
    }
}

/// Reads bounded tables through their connectors.
#[derive(Debug)]
pub struct ConnectorBatchScan;

#[async_trait]
impl BatchScan for ConnectorBatchScan {
    async fn scan_all(&self, table: &TableDef) -> Result<Vec<RecordBatch>> {
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
        let factory = weir_connectors::create_source(
            &table.options,
            table.physical_schema.clone(),
            &table.metadata_keys(),
            &table.primary_key,
        )
        .await?;
        if !factory.is_bounded() {
            return Err(Error::plan(format!(
                "table '{}' is unbounded; batch mode reads bounded tables only (set 'number-of-rows' \
                 or a sequence end, remove 'source.monitor-interval', or run in streaming mode)",
                table.name
            )));
        }
        let mut source = factory.create(&task(&table.name), None)?;
        source.open().await?;
        let calc = computed_physical(table)?.map(|exprs| {
            CalcOperator::new(vec![CalcStep::Project {
                exprs,
                schema: table.schema.clone(),
            }])
        });
        let mut out = Vec::new();
        loop {
            let batches = match source.poll_next().await? {
                SourcePoll::Batch(b) => vec![b],
                SourcePoll::Splits { batches, .. } => batches.into_iter().map(|(_, b)| b).collect(),
                SourcePoll::Idle(d) => {
                    tokio::time::sleep(d).await;
                    continue;
                }
                SourcePoll::Finished => break,
            };
            for b in batches {
                match &calc {
                    Some(c) => out.extend(c.apply(b)?),
                    None => out.push(b),
                }
            }
        }
        source.close().await?;
        Ok(out)
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
    let batches = planner.execute_batch(query.logical.clone()).await?;
    let Some(table) = &query.sink else {
        return Ok(BatchResult::Rows(batches));
    };
    let schema = table.sink_schema.clone();
    let sink = weir_connectors::create_sink(
        &table.options,
        schema.clone(),
        &table.partitioned_by,
        &table.primary_key,
        &table.sink_metadata_keys(),
        None,
    )
    .await?;
    // What the table holds before anything is written, to replace on overwrite.
    let before = match query.overwrite {
        true => Some(weir_connectors::filesystem::overwrite::Snapshot::take(&table.options).await?),
        false => None,
    };
    let mut op = sink.create(&task(&table.name))?;
    op.open(None).await?;
    let mut out = Output::default();
    let mut rows = 0;
    for b in &batches {
        let b = conform(b, &schema, &table.name)?;
        rows += b.num_rows() as u64;
        op.process_batch(0, b, &mut out).await?;
    }
    // One commit at the end, through the same two-phase protocol as a final checkpoint.
    let last = CheckpointId(1);
    op.end_input(0, &mut out).await?;
    op.finish(&mut out).await?;
    op.prepare_snapshot_pre_barrier(last, &mut out).await?;
    op.snapshot_state(last)?;
    op.notify_checkpoint_complete(last).await?;
    op.close().await?;
    if let Some(before) = before {
        before
            .replace(&table.options, !table.partitioned_by.is_empty())
            .await?;
    }
    Ok(BatchResult::Written(rows))
}
