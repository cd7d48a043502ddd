//! The coordinator process (`weir coordinator`, Flink's job manager): keeps the registry
//! of workers, takes job submissions, and runs each job's supervisor and checkpoint
//! coordinator with the job's tasks placed on the workers ([`ClusterJob`] is the
//! runtime's [`Cluster`]).
//!
//! A worker is lost when its control stream ends (its process died, the connection
//! broke) or sends nothing for `heartbeat.timeout`: the parts it ran fail, and with them
//! their attempts, which the job's restart strategy restarts on the workers left.

use crate::JobDefinition;
use crate::service::{Node, serve, status};
use crate::wire::{ToCoordinator, ToWorker, control_frame, read_control};
use arrow_flight::{Action, FlightData};
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::ObjectStoreExt as _;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tonic::{Response, Status, Streaming};
use weir_common::{Error, Result};
use weir_runtime::remote::{AttemptSpec, Cluster, PartLink, Placement, TaskEvent, spread};

/// The `submit` action's result messages (JSON in each result's body).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum JobUpdate {
    Started {
        job_id: String,
        restored_from: Option<String>,
        /// Each vertex (chained operators) and the workers of its subtasks, in order.
        placement: Vec<(String, Vec<String>)>,
    },
    Finished {
        checkpoints: u64,
        restarts: u64,
        last_checkpoint: Option<String>,
        rows_in: u64,
        rows_out: u64,
    },
}

/// A registered worker.
struct WorkerEntry {
    slots: usize,
    data_address: String,
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
}

/// A running coordinator.
pub struct Coordinator {
    pub address: SocketAddr,
    pub state: Arc<CoordinatorState>,
}

impl Coordinator {
    /// Listens, and resumes the jobs recorded under the configuration's `ha_dir`.
    pub async fn start(config: CoordinatorConfig) -> Result<Coordinator> {
        let records = JobRecords(match &config.ha_dir {
            Some(dir) => Some(weir_runtime::storage::resolve_location(dir)?),
            None => None,
        });
        let listener = tokio::net::TcpListener::bind(&config.listen)
            .await
            .map_err(|e| Error::config(format!("cannot listen on '{}': {e}", config.listen)))?;
        let state = Arc::new(CoordinatorState {
            workers: Mutex::new(BTreeMap::new()),
            next_worker: 1.into(),
            heartbeat_timeout: config.heartbeat_timeout,
            slot_timeout: config.slot_timeout,
            jobs: Mutex::new(HashMap::new()),
            running: Mutex::new(HashMap::new()),
            records,
        });
        let address = serve(Node::Coordinator(state.clone()), listener)?;
        state.resume_recorded().await?;
        Ok(Coordinator { address, state })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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

    /// `submit`: runs a job (or follows the one already submitted with the same id) and
    /// reports its start and end on the result stream.
    pub(crate) async fn action(
        self: Arc<Self>,
        action: Action,
    ) -> std::result::Result<
        Response<BoxStream<'static, std::result::Result<arrow_flight::Result, Status>>>,
        Status,
    > {
        match action.r#type.as_str() {
            "submit" => {}
            "list" => {
                let body = serde_json::to_vec(&self.running()).expect("job lists serialize");
                let one =
                    futures::stream::once(
                        async move { Ok(arrow_flight::Result { body: body.into() }) },
                    );
                return Ok(Response::new(one.boxed()));
            }
            "stop" => {
                let request: StopRequest = serde_json::from_slice(&action.body)
                    .map_err(|e| Status::invalid_argument(format!("unreadable request: {e}")))?;
                let savepoint = self.stop(request).await.map_err(status)?;
                let one = futures::stream::once(async move {
                    Ok(arrow_flight::Result {
                        body: savepoint.into_bytes().into(),
                    })
                });
                return Ok(Response::new(one.boxed()));
            }
            other => {
                return Err(Status::unimplemented(format!("unknown action '{other}'")));
            }
        }
        let submission: Submission = serde_json::from_slice(&action.body)
            .map_err(|e| Status::invalid_argument(format!("unreadable job: {e}")))?;
        let known = lock(&self.jobs).get(&submission.id).cloned();
        let status = match known {
            Some(status) => status,
            None => {
                let mut job = submission.job;
                if submission.resume && job.restore.is_none() {
                    // The coordinator that ran it is gone and kept no record: go on from
                    // the job's latest checkpoint.
                    job.restore = Some("latest".into());
                }
                self.clone().run_job(submission.id, job).await
            }
        };
        Ok(Response::new(follow(status)))
    }

    /// The jobs running now.
    fn running(&self) -> Vec<RunningJob> {
        let mut jobs: Vec<RunningJob> = lock(&self.running)
            .iter()
            .map(|(id, r)| RunningJob {
                job_id: id.clone(),
                rows_in: r.metrics.rows_in(),
                rows_out: r.metrics.rows_out(),
                restarts: r.metrics.restarts(),
                last_checkpoint: r.metrics.last_checkpoint(),
                status: if r.metrics.is_restarting() {
                    "RESTARTING"
                } else {
                    "RUNNING"
                }
                .into(),
                placement: lock(&r.cluster.placed).clone(),
            })
            .collect();
        jobs.sort_by(|a, b| a.job_id.cmp(&b.job_id));
        jobs
    }

    /// Stops a running job (its id, or a unique prefix of it) with a savepoint.
    async fn stop(&self, request: StopRequest) -> Result<String> {
        let (id, controller, default_dir) = {
            let running = lock(&self.running);
            let matching: Vec<_> = running
                .iter()
                .filter(|(id, _)| id.starts_with(&request.job))
                .collect();
            match matching[..] {
                [(id, r)] => (id.clone(), r.controller.clone(), r.savepoint_dir.clone()),
                [] => {
                    return Err(Error::config(format!(
                        "no running job '{}' on this coordinator",
                        request.job
                    )));
                }
                _ => {
                    return Err(Error::config(format!(
                        "'{}' names {} running jobs; give more of the id",
                        request.job,
                        matching.len()
                    )));
                }
            }
        };
        let dir = request.savepoint_dir.or(default_dir).ok_or_else(|| {
            Error::config(
                "no savepoint folder: pass --savepoint-dir or set \
                 execution.checkpointing.savepoint-dir in the job",
            )
        })?;
        tracing::info!("stopping job {id} with a savepoint under {dir}");
        controller.stop_with_savepoint(request.drain, &dir).await
    }

    /// Records and starts a job; its status is what submitters follow.
    async fn run_job(
        self: Arc<Self>,
        id: uuid::Uuid,
        job: JobDefinition,
    ) -> tokio::sync::watch::Receiver<JobStatus> {
        let (tx, rx) = tokio::sync::watch::channel(JobStatus::Starting);
        lock(&self.jobs).insert(id, rx.clone());
        if let Err(e) = self.records.save(id, &job).await {
            tracing::warn!("cannot record job {id}: {e}");
        }
        tokio::spawn(async move {
            let ended = self.run_to_end(job, &tx).await;
            if let Err(e) = &ended {
                tracing::warn!("job {id} failed: {e}");
            }
            // Ended for good: a restarted coordinator does not resume it.
            self.records.remove(id).await;
            let _ = tx.send(match ended {
                Ok(finished) => finished,
                Err(e) => JobStatus::Failed {
                    user_error: matches!(e, Error::Config(_) | Error::Sql { .. } | Error::Plan(_)),
                    message: e.to_string(),
                },
            });
        });
        rx
    }

    async fn run_to_end(
        self: &Arc<Self>,
        job: JobDefinition,
        status: &tokio::sync::watch::Sender<JobStatus>,
    ) -> Result<JobStatus> {
        let (engine, graph) = job.compile().await?;
        let needed = graph
            .vertices
            .iter()
            .map(|v| v.parallelism)
            .max()
            .unwrap_or(0);
        self.wait_for_slots(needed).await;
        let restore = job.restore.as_ref().map(|r| match r.as_str() {
            "latest" => weir_runtime::RestoreFrom::Latest,
            path => weir_runtime::RestoreFrom::Path(path.to_string()),
        });
        let cluster = Arc::new(ClusterJob {
            state: self.clone(),
            job,
            placed: Mutex::new(Vec::new()),
        });
        let handle = engine
            .start_on(graph, restore, Some(cluster.clone()))
            .await?;
        tracing::info!("job {} started", handle.job_id);
        let _ = status.send(JobStatus::Running(JobUpdate::Started {
            job_id: handle.job_id.to_string(),
            restored_from: handle.restored_from.clone(),
            placement: lock(&cluster.placed).clone(),
        }));
        let job_id = handle.job_id;
        lock(&self.running).insert(
            job_id.to_string(),
            Running {
                controller: handle.controller(),
                metrics: handle.metrics.clone(),
                savepoint_dir: engine.config().savepoint_dir(),
                cluster: cluster.clone(),
            },
        );
        // The session lives as long as the job (its REST server, if any).
        let metrics = handle.metrics.clone();
        let outcome = handle.wait().await;
        lock(&self.running).remove(&job_id.to_string());
        drop(engine);
        let o = outcome?;
        tracing::info!("job {job_id} finished");
        Ok(JobStatus::Ended(JobUpdate::Finished {
            checkpoints: o.checkpoints_completed,
            restarts: o.restarts,
            last_checkpoint: o.last_checkpoint,
            rows_in: metrics.rows_in(),
            rows_out: metrics.rows_out(),
        }))
    }

    /// Waits up to `slot_timeout` for workers with `needed` slots in all: workers may
    /// still be registering (after a restart of the coordinator, or of the cluster).
    async fn wait_for_slots(&self, needed: usize) {
        let deadline = tokio::time::Instant::now() + self.slot_timeout;
        let mut said = false;
        loop {
            let slots: usize = self.workers().iter().map(|w| w.1).sum();
            if slots >= needed || tokio::time::Instant::now() >= deadline {
                return;
            }
            if !said {
                tracing::info!(
                    "waiting for workers: the job needs {needed} slots, there are {slots}"
                );
                said = true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Resumes the jobs a previous coordinator recorded and did not see end, from their
    /// latest checkpoints.
    async fn resume_recorded(self: &Arc<Self>) -> Result<()> {
        for (id, mut job) in self.records.load().await? {
            tracing::info!("resuming job {id}, recorded by an earlier coordinator");
            job.restore = Some("latest".into());
            self.clone().run_job(id, job).await;
        }
        Ok(())
    }
}

/// A running job, as the coordinator controls it.
struct Running {
    controller: weir_runtime::JobController,
    metrics: Arc<weir_runtime::JobMetrics>,
    savepoint_dir: Option<String>,
    cluster: Arc<ClusterJob>,
}

/// A running job, as `weir list --cluster` shows it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct RunningJob {
    pub job_id: String,
    /// Rows the sources emitted and the sinks took, over the workers' reports.
    pub rows_in: u64,
    pub rows_out: u64,
    /// `RUNNING` or `RESTARTING`.
    pub status: String,
    pub restarts: u64,
    pub last_checkpoint: Option<u64>,
    /// See [`JobUpdate::Started`].
    pub placement: Vec<(String, Vec<String>)>,
}

/// `weir stop --cluster`: stop a job with a savepoint.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct StopRequest {
    /// The job id, or a unique prefix of it.
    pub job: String,
    pub drain: bool,
    /// Default: the job's `execution.checkpointing.savepoint-dir`.
    pub savepoint_dir: Option<String>,
}

/// A submission: the job, and an id chosen by the submitter so that it can follow the
/// job again after losing its connection.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Submission {
    pub id: uuid::Uuid,
    pub job: JobDefinition,
    /// Submitted again after the connection was lost: a coordinator that does not know
    /// the job (it restarted without records) resumes it from its latest checkpoint.
    pub resume: bool,
}

/// Where a submitted job is.
#[derive(Debug, Clone)]
enum JobStatus {
    Starting,
    Running(JobUpdate),
    Ended(JobUpdate),
    Failed { user_error: bool, message: String },
}

/// The updates a submitter sees: the start once running, then the end.
fn follow(
    status: tokio::sync::watch::Receiver<JobStatus>,
) -> BoxStream<'static, std::result::Result<arrow_flight::Result, Status>> {
    let encode = |u: &JobUpdate| {
        Ok(arrow_flight::Result {
            body: serde_json::to_vec(u).expect("updates serialize").into(),
        })
    };
    futures::stream::unfold(
        (status, false, false),
        move |(mut rx, started, done)| async move {
            if done {
                return None;
            }
            loop {
                let now = rx.borrow_and_update().clone();
                match now {
                    JobStatus::Running(u) if !started => {
                        return Some((encode(&u), (rx, true, false)));
                    }
                    JobStatus::Ended(u) => return Some((encode(&u), (rx, started, true))),
                    JobStatus::Failed {
                        user_error,
                        message,
                    } => {
                        let s = if user_error {
                            Status::invalid_argument(message)
                        } else {
                            // Not `internal`: a broken connection can look like that.
                            Status::aborted(message)
                        };
                        return Some((Err(s), (rx, started, true)));
                    }
                    _ => {}
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        },
    )
    .boxed()
}

/// The coordinator's record of the jobs it runs (`high-availability.storageDir`): one
/// JSON file per job under `jobs/`, written when the job is submitted and removed when
/// it ends. A coordinator started on the same folder resumes the jobs recorded there.
struct JobRecords(Option<(Arc<dyn object_store::ObjectStore>, object_store::path::Path)>);

impl JobRecords {
    fn path(&self, id: uuid::Uuid) -> Option<object_store::path::Path> {
        self.0
            .as_ref()
            .map(|(_, root)| root.clone().join("jobs").join(format!("{id}.json")))
    }

    async fn save(&self, id: uuid::Uuid, job: &JobDefinition) -> Result<()> {
        let (Some((store, _)), Some(path)) = (&self.0, self.path(id)) else {
            return Ok(());
        };
        let body = serde_json::to_vec(job).map_err(|e| Error::internal(e.to_string()))?;
        store.put(&path, body.into()).await?;
        Ok(())
    }

    async fn remove(&self, id: uuid::Uuid) {
        if let (Some((store, _)), Some(path)) = (&self.0, self.path(id))
            && let Err(e) = store.delete(&path).await
        {
            tracing::warn!("cannot remove the record of job {id}: {e}");
        }
    }

    async fn load(&self) -> Result<Vec<(uuid::Uuid, JobDefinition)>> {
        let Some((store, root)) = &self.0 else {
            return Ok(Vec::new());
        };
        let listed: Vec<_> = store
            .list(Some(&root.clone().join("jobs")))
            .collect::<Vec<_>>()
            .await;
        let mut jobs = Vec::new();
        for meta in listed {
            let meta = meta?;
            let Some(id) = meta
                .location
                .filename()
                .and_then(|f| f.strip_suffix(".json"))
                .and_then(|f| uuid::Uuid::parse_str(f).ok())
            else {
                continue;
            };
            let body = store.get(&meta.location).await?.bytes().await?;
            let job = serde_json::from_slice(&body).map_err(|e| {
                Error::config(format!("unreadable job record '{}': {e}", meta.location))
            })?;
            jobs.push((id, job));
        }
        Ok(jobs)
    }
}

/// One job's view of the cluster.
struct ClusterJob {
    state: Arc<CoordinatorState>,
    job: JobDefinition,
    /// Where the latest attempt placed each vertex's subtasks (by worker address).
    placed: Mutex<Vec<(String, Vec<String>)>>,
}

impl Cluster for ClusterJob {
    fn place(&self, vertices: &[(String, usize)]) -> Result<Placement> {
        let workers = self.state.workers();
        let slots: Vec<usize> = workers.iter().map(|w| w.1).collect();
        let parallelism: Vec<usize> = vertices.iter().map(|v| v.1).collect();
        let of = spread(&parallelism, &slots)?;
        let shown: Vec<(String, Vec<String>)> = vertices
            .iter()
            .zip(&of)
            .map(|((name, _), at)| {
                (
                    name.clone(),
                    at.iter().map(|&w| workers[w].2.clone()).collect(),
                )
            })
            .collect();
        for (name, at) in &shown {
            tracing::info!("{name}: subtasks on {}", at.join(", "));
        }
        *lock(&self.placed) = shown;
        Ok(Placement {
            workers: workers.into_iter().map(|w| w.2).collect(),
            of,
        })
    }

    fn run_part(
        &self,
        worker: usize,
        spec: AttemptSpec,
        link: PartLink,
    ) -> weir_runtime::job::Part {
        let PartLink {
            controls,
            events,
            metrics,
            checkpoint_requests,
        } = link;
        let address = spec.workers[worker].clone();
        let attempt = spec.attempt;
        let (ended_tx, ended_rx) = oneshot::channel();
        let to_worker = {
            let mut workers = lock(&self.state.workers);
            workers
                .iter_mut()
                .find(|(_, w)| w.data_address == address)
                .map(|(id, w)| {
                    w.parts.insert(
                        attempt,
                        PartEntry {
                            events,
                            ended: Some(ended_tx),
                            metrics,
                            reported: (0, 0),
                            checkpoint_requests,
                        },
                    );
                    (*id, w.to_worker.clone())
                })
        };
        let Some((worker_id, to_worker)) = to_worker else {
            return Box::pin(
                async move { Err(Error::External(format!("worker {address} is gone"))) },
            );
        };
        let _ = to_worker.send(ToWorker::Start {
            job: self.job.clone(),
            spec,
            me: worker,
        });
        // The coordinator's messages for the part's tasks, in order per task.
        let forward = {
            let to_worker = to_worker.clone();
            let merged = futures::stream::select_all(controls.into_iter().map(|(task, rx)| {
                tokio_stream::wrappers::UnboundedReceiverStream::new(rx).map(move |c| (task, c))
            }));
            tokio::spawn(async move {
                let mut merged = merged;
                while let Some((task, control)) = merged.next().await {
                    let _ = to_worker.send(ToWorker::Control {
                        attempt,
                        task,
                        control,
                    });
                }
            })
        };
        let cancel = CancelOnDrop {
            state: self.state.clone(),
            worker_id,
            attempt,
            to_worker,
            forward,
            done: false,
        };
        Box::pin(async move {
            let mut cancel = cancel;
            let result = ended_rx.await;
            cancel.done = true;
            match result {
                Ok(Ok(())) => Ok(()),
                Ok(Err(why)) => Err(Error::Remote(format!("worker {address}: {why}"))),
                Err(_) => Err(Error::Remote(format!("worker {address} was lost"))),
            }
        })
    }
}

/// Cancels a worker's part of an attempt when the coordinator gives the part up before
/// it ended (the attempt failed elsewhere, or the job was cancelled).
struct CancelOnDrop {
    state: Arc<CoordinatorState>,
    worker_id: u64,
    attempt: uuid::Uuid,
    to_worker: mpsc::UnboundedSender<ToWorker>,
    forward: tokio::task::JoinHandle<()>,
    done: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.forward.abort();
        if !self.done {
            let _ = self.to_worker.send(ToWorker::Cancel {
                attempt: self.attempt,
            });
            if let Some(w) = lock(&self.state.workers).get_mut(&self.worker_id) {
                w.parts.remove(&self.attempt);
            }
        }
    }
}
