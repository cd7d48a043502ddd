//! A Ballista scheduler keeps a job's tasks queued until an executor takes them, without
//! end: a job submitted to a cluster without executors, or whose executors all went
//! away, waits for ever. Flink fails a job that gets no slot within
//! `slot.request.timeout`; a Weir batch job on Ballista does the same. While a query's
//! result streams, the client asks the scheduler's readiness probe (`/readyz`: at least
//! one live executor) every second, and fails the query once the cluster has had no
//! executor (or the scheduler has not answered) for that long. Nothing is committed
//! then, as for any failed batch job.

use datafusion::common::DataFusionError;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::TaskContext;
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type DfResult<T> = datafusion::common::Result<T>;

/// How often the probe is asked.
const EVERY: Duration = Duration::from_secs(1);

/// The scheduler's readiness probe, and how long the cluster may go without executors.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    /// `host:port` of the scheduler.
    pub(crate) scheduler: String,
    pub(crate) timeout: Duration,
}

impl Probe {
    /// Whether the scheduler has a live executor; `Err` when it does not answer.
    async fn ready(&self) -> std::io::Result<bool> {
        let ask = async {
            let mut s = tokio::net::TcpStream::connect(&self.scheduler).await?;
            let request = format!(
                "GET /readyz HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                self.scheduler
            );
            s.write_all(request.as_bytes()).await?;
            let mut head = Vec::new();
            s.read_to_end(&mut head).await?;
            Ok(head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200"))
        };
        tokio::time::timeout(Duration::from_secs(5), ask)
            .await
            .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
    }

    /// Resolves once the cluster has had no executor for `timeout`, with the error to
    /// fail the query with.
    pub(crate) async fn lost(self) -> DataFusionError {
        let mut since: Option<Instant> = None;
        loop {
            let why = match self.ready().await {
                Ok(true) => None,
                Ok(false) => Some("has no executor".to_string()),
                Err(e) => Some(format!("does not answer ({e})")),
            };
            match why {
                None => since = None,
                Some(why) => {
                    let first = *since.get_or_insert_with(Instant::now);
                    if first.elapsed() >= self.timeout {
                        return DataFusionError::Execution(format!(
                            "the Ballista scheduler at {} {why}, and has had none for {} s \
                             (slot.request.timeout): start executors (weir \
                             ballista-executor --scheduler {}) or raise \
                             slot.request.timeout",
                            self.scheduler,
                            self.timeout.as_secs(),
                            self.scheduler
                        ));
                    }
                }
            }
            tokio::time::sleep(EVERY).await;
        }
    }
}

/// Ballista's query planner, with the plans it makes watched by a [`Probe`].
#[derive(Debug)]
pub(crate) struct WatchedPlanner {
    pub(crate) inner: Arc<dyn QueryPlanner + Send + Sync>,
    pub(crate) probe: Probe,
}

#[async_trait::async_trait]
impl QueryPlanner for WatchedPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn datafusion::catalog::Session,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let plan = self
            .inner
            .create_physical_plan(logical_plan, session)
            .await?;
        Ok(Arc::new(WatchedExec {
            input: plan,
            probe: self.probe.clone(),
        }))
    }
}

/// A distributed query whose result stream fails once its cluster has no executor.
#[derive(Debug)]
struct WatchedExec {
    input: Arc<dyn ExecutionPlan>,
    probe: Probe,
}

impl DisplayAs for WatchedExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "WatchedExec: fails after {} s without executors",
            self.probe.timeout.as_secs()
        )
    }
}

impl ExecutionPlan for WatchedExec {
    fn name(&self) -> &str {
        "WatchedExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn apply_expressions(
        &self,
        _: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let [input] = <[_; 1]>::try_from(children).map_err(|c| {
            DataFusionError::Internal(format!("WatchedExec has one input, not {}", c.len()))
        })?;
        Ok(Arc::new(WatchedExec {
            input,
            probe: self.probe.clone(),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let rows = self.input.execute(partition, context)?;
        let schema = rows.schema();
        let lost = Box::pin(self.probe.clone().lost());
        // The rows, until the probe gives up: then its error, and the end.
        let watched = futures::stream::unfold(Some((rows, lost)), |state| async move {
            let (mut rows, mut lost) = state?;
            tokio::select! {
                row = rows.next() => row.map(|r| (r, Some((rows, lost)))),
                e = &mut lost => Some((Err(e), None)),
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, watched)))
    }
}
