//! The coordinator process (`weir coordinator`, Flink's job manager): keeps the registry
//! of workers, takes job submissions, and runs each job's supervisor and checkpoint
//! coordinator with the job's tasks placed on the workers.
//!
//! A worker is lost when its control stream ends (its process died, the connection
//! broke) or sends nothing for `heartbeat.timeout`: the parts it ran fail, and with them
//! their attempts, which the job's restart strategy restarts on the workers left.
//!
//! Jobs, their records and submitters are in `jobs`; a job's view of the workers (the
//! runtime's [`weir_runtime::remote::Cluster`]) is in `placement`.

mod jobs;
mod placement;

use jobs::{JobRecords, JobStatus, Running};
pub use jobs::{JobUpdate, RunningJob, StopRequest, Submission};

use crate::lock;
use crate::service::{Node, serve, status};
use crate::wire::{ToCoordinator, ToWorker, control_frame, read_control};
use arrow_flight::FlightData;
use futures::StreamExt;
use futures::stream::BoxStream;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tonic::{Response, Status, Streaming};
use weir_common::{Error, Result};
use weir_runtime::metrics::TaskSample;
use weir_runtime::remote::{TaskEvent, TaskRef};

/// A registered worker.
struct WorkerEntry {
    slots: usize,
    data_address: String,
    /// When it last sent anything, ms since the epoch.
    last_heard_ms: u64,
    to_worker: mpsc::UnboundedSender<ToWorker>,
    /// The parts of attempts it runs.
    parts: HashMap<uuid::Uuid, PartEntry>,
}

/// What the coordinator keeps of a part a worker runs.
struct PartEntry {
    events: mpsc::UnboundedSender<TaskEvent>,
    ended: Option<oneshot::Sender<std::result::Result<(), String>>>,
    /// The job's metrics, and the rows in and out the part reported last (its counts
    /// are cumulative; the job's grow by the difference).
    metrics: Arc<weir_runtime::JobMetrics>,
    reported: (u64, u64),
    /// Each task's sample the part reported last.
    reported_tasks: HashMap<TaskRef, TaskSample>,
    checkpoint_requests: Arc<tokio::sync::Notify>,
}

/// The coordinator's state, shared by its Flight service and its jobs.
pub struct CoordinatorState {
    workers: Mutex<BTreeMap<u64, WorkerEntry>>,
    next_worker: std::sync::atomic::AtomicU64,
    heartbeat_timeout: Duration,
    slot_timeout: Duration,
    /// Jobs submitted to this coordinator, by submission id.
    jobs: Mutex<HashMap<uuid::Uuid, tokio::sync::watch::Receiver<JobStatus>>>,
    /// Jobs running now, by job id.
    running: Mutex<HashMap<String, Running>>,
    records: JobRecords,
    /// The REST API, dashboard and Prometheus endpoint, where every job registers.
    web: Option<Arc<weir_web::WebServer>>,
}

/// How a coordinator runs.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// Where it listens for workers and submissions (`host:port`; port 0 picks one).
    pub listen: String,
    /// A worker that sends nothing this long is lost (`heartbeat.timeout`).
    pub heartbeat_timeout: Duration,
    /// How long a job waits for enough task slots before it starts anyway (and fails to
    /// place its tasks) (`slot.request.timeout`).
    pub slot_timeout: Duration,
    /// Where it records the jobs it runs, to resume them after a restart
    /// (`high-availability.storageDir`; a folder or URL).
    pub ha_dir: Option<String>,
    /// Its REST API and dashboard (`rest.port`, `rest.bind-address`) and Prometheus
    /// endpoint (`metrics.reporter.prom.port`), which show every job it runs.
    pub web: weir_common::Config,
}

/// A running coordinator.
pub struct Coordinator {
    pub address: SocketAddr,
    /// Where its REST API and dashboard listen.
    pub rest: Option<SocketAddr>,
    /// Where its Prometheus endpoint listens.
    pub prometheus: Option<SocketAddr>,
    pub state: Arc<CoordinatorState>,
}

impl Coordinator {
    /// Listens, and resumes the jobs recorded under the configuration's `ha_dir`.
    pub async fn start(config: CoordinatorConfig) -> Result<Coordinator> {
        let records = JobRecords::at(config.ha_dir.as_deref())?;
        let listener = tokio::net::TcpListener::bind(&config.listen)
            .await
            .map_err(|e| Error::config(format!("cannot listen on '{}': {e}", config.listen)))?;
        let web = weir_web::WebServer::start(&config.web).await?.map(Arc::new);
        let state = Arc::new(CoordinatorState {
            workers: Mutex::new(BTreeMap::new()),
            next_worker: 1.into(),
            heartbeat_timeout: config.heartbeat_timeout,
            slot_timeout: config.slot_timeout,
            jobs: Mutex::new(HashMap::new()),
            running: Mutex::new(HashMap::new()),
            records,
            web: web.clone(),
        });
        if let Some(web) = &web {
            web.jobs
                .set_workers(Arc::new(WebView(Arc::downgrade(&state))));
        }
        let address = serve(Node::Coordinator(state.clone()), listener)?;
        state.resume_recorded().await?;
        Ok(Coordinator {
            address,
            rest: web.as_ref().and_then(|w| w.rest),
            prometheus: web.as_ref().and_then(|w| w.prometheus),
            state,
        })
    }
}

/// The coordinator's workers, as its REST API shows them.
struct WebView(std::sync::Weak<CoordinatorState>);

impl weir_web::Workers for WebView {
    fn task_managers(&self) -> Vec<weir_web::TaskManagerInfo> {
        let Some(state) = self.0.upgrade() else {
            return Vec::new();
        };
        // Slot sharing: a job takes, on each worker, as many slots as the most subtasks
        // of one vertex placed there.
        let mut taken: HashMap<String, usize> = HashMap::new();
        for r in lock(&state.running).values() {
            let mut on: HashMap<&str, usize> = HashMap::new();
            let placed = lock(&r.cluster.placed).clone();
            for (_, workers) in &placed {
                let mut here: HashMap<&str, usize> = HashMap::new();
                for w in workers {
                    *here.entry(w).or_default() += 1;
                }
                for (w, n) in here {
                    let most = on.entry(w).or_default();
                    *most = (*most).max(n);
                }
            }
            for (w, n) in on {
                *taken.entry(w.to_string()).or_default() += n;
            }
        }
        lock(&state.workers)
            .iter()
            .map(|(id, w)| weir_web::TaskManagerInfo {
                id: format!("worker-{id}"),
                address: w.data_address.clone(),
                slots: w.slots,
                free_slots: w
                    .slots
                    .saturating_sub(taken.get(&w.data_address).copied().unwrap_or(0)),
                last_heartbeat_ms: w.last_heard_ms,
            })
            .collect()
    }

    fn placement(&self, job_id: &str) -> Option<Vec<Vec<String>>> {
        let state = self.0.upgrade()?;
        let running = lock(&state.running);
        let placed = lock(&running.get(job_id)?.cluster.placed).clone();
        Some(placed.into_iter().map(|(_, on)| on).collect())
    }
}

impl CoordinatorState {
    /// Registered workers: (id, slots, data address).
    pub fn workers(&self) -> Vec<(u64, usize, String)> {
        lock(&self.workers)
            .iter()
            .map(|(id, w)| (*id, w.slots, w.data_address.clone()))
            .collect()
    }

    /// A worker's control stream: registration first, then heartbeats, events and ends
    /// of parts, until it ends or falls silent.
    pub(crate) async fn worker_stream(
        self: Arc<Self>,
        mut inbound: Streaming<FlightData>,
    ) -> std::result::Result<
        Response<BoxStream<'static, std::result::Result<FlightData, Status>>>,
        Status,
    > {
        let first = match tokio::time::timeout(self.heartbeat_timeout, inbound.next()).await {
            Ok(Some(Ok(frame))) => frame,
            _ => return Err(Status::invalid_argument("a worker must register first")),
        };
        let ToCoordinator::Register {
            slots,
            data_address,
        } = read_control(&first).map_err(status)?
        else {
            return Err(Status::invalid_argument("a worker must register first"));
        };
        // A worker that registers again (its connection broke and it came back before
        // this coordinator noticed) replaces its old entry: the parts it ran there fail.
        let stale: Vec<u64> = lock(&self.workers)
            .iter()
            .filter(|(_, w)| w.data_address == data_address)
            .map(|(id, _)| *id)
            .collect();
        for old in stale {
            self.lose(old, "it registered again");
        }
        let id = self
            .next_worker
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (to_worker, outbound) = mpsc::unbounded_channel::<ToWorker>();
        let _ = to_worker.send(ToWorker::Registered { worker_id: id });
        lock(&self.workers).insert(
            id,
            WorkerEntry {
                slots,
                data_address: data_address.clone(),
                last_heard_ms: weir_common::now_ms(),
                to_worker,
                parts: HashMap::new(),
            },
        );
        tracing::info!("worker {id} registered: {slots} slot(s), data at {data_address}");
        let state = self.clone();
        tokio::spawn(async move {
            let why = loop {
                match tokio::time::timeout(state.heartbeat_timeout, inbound.next()).await {
                    Err(_) => {
                        break format!(
                            "sent no heartbeat for {} ms (heartbeat.timeout)",
                            state.heartbeat_timeout.as_millis()
                        );
                    }
                    Ok(None) => break "closed its connection".to_string(),
                    Ok(Some(Err(e))) => break format!("connection failed: {}", e.message()),
                    Ok(Some(Ok(frame))) => match read_control::<ToCoordinator>(&frame) {
                        Ok(msg) => state.on_message(id, msg),
                        Err(e) => break e.to_string(),
                    },
                }
            };
            state.lose(id, &why);
        });
        let stream = tokio_stream::wrappers::UnboundedReceiverStream::new(outbound)
            .map(|msg| Ok(control_frame(&msg)));
        Ok(Response::new(stream.boxed()))
    }

    fn on_message(&self, worker: u64, msg: ToCoordinator) {
        let mut workers = lock(&self.workers);
        let Some(entry) = workers.get_mut(&worker) else {
            return;
        };
        entry.last_heard_ms = weir_common::now_ms();
        match msg {
            ToCoordinator::Register { .. } | ToCoordinator::Heartbeat => {}
            ToCoordinator::RequestCheckpoint { attempt } => {
                if let Some(part) = entry.parts.get(&attempt) {
                    part.checkpoint_requests.notify_one();
                }
            }
            ToCoordinator::Progress {
                attempt,
                rows_in,
                rows_out,
                tasks,
            } => {
                if let Some(part) = entry.parts.get_mut(&attempt) {
                    use std::sync::atomic::Ordering::Relaxed;
                    let (was_in, was_out) = part.reported;
                    part.metrics
                        .rows_in
                        .fetch_add(rows_in.saturating_sub(was_in), Relaxed);
                    part.metrics
                        .rows_out
                        .fetch_add(rows_out.saturating_sub(was_out), Relaxed);
                    part.reported = (rows_in.max(was_in), rows_out.max(was_out));
                    for ((v, s), now) in tasks {
                        if let Some(task) = part.metrics.subtask(v, s) {
                            let before = part.reported_tasks.entry((v, s)).or_default();
                            task.advance(before, &now);
                            *before = now;
                        }
                    }
                }
            }
            ToCoordinator::Event { attempt, event } => {
                if let Some(part) = entry.parts.get(&attempt) {
                    let _ = part.events.send(event);
                }
            }
            ToCoordinator::PartEnded { attempt, error } => {
                if let Some(mut part) = entry.parts.remove(&attempt)
                    && let Some(ended) = part.ended.take()
                {
                    let _ = ended.send(error.map_or(Ok(()), Err));
                }
            }
        }
    }

    /// Forgets a worker: the parts it ran fail.
    fn lose(&self, worker: u64, why: &str) {
        let Some(entry) = lock(&self.workers).remove(&worker) else {
            return;
        };
        tracing::warn!("worker {worker} ({}) is lost: {why}", entry.data_address);
        for (_, mut part) in entry.parts {
            if let Some(ended) = part.ended.take() {
                let _ = ended.send(Err(format!("the worker was lost: {why}")));
            }
        }
    }
}
