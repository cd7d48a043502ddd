//! Watching and steering running jobs over HTTP: Flink's REST API (`/jobs`,
//! `/jobs/{id}`, checkpoints, vertices, back-pressure, watermarks, exceptions, stop with
//! a savepoint, cancel), a web dashboard served from assets built into the binary, and a
//! Prometheus text endpoint (`/metrics`).
//!
//! Jobs are registered in [`Jobs`] by whoever starts them (the engine); a [`Sampler`]
//! reads every job's counters once a second and keeps the per-second rates (records/s,
//! busy, idle and back-pressured time per second, as Flink's task metrics) and a short
//! history for the dashboard's charts. Reading a counter never stops a task.

mod prometheus;
mod rest;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use weir_common::{Error, Result};
use weir_runtime::metrics::TaskSample;
use weir_runtime::{JobController, JobMetrics};

/// How often counters are sampled (and the dashboard refreshes).
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Samples kept per job for the charts (5 minutes).
const CHART_POINTS: usize = 300;

/// How a job is doing, by Flink's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobStatus {
    Running,
    Restarting,
    Finished,
    Failed,
    Canceled,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Running => "RUNNING",
            JobStatus::Restarting => "RESTARTING",
            JobStatus::Finished => "FINISHED",
            JobStatus::Failed => "FAILED",
            JobStatus::Canceled => "CANCELED",
        }
    }
}

/// A stop-with-savepoint asked for through the REST API.
#[derive(Debug, Clone)]
enum SavepointOperation {
    InProgress,
    Completed(String),
    Failed(String),
}

/// One job known to the server.
pub struct JobEntry {
    pub id: String,
    pub name: String,
    pub metrics: Arc<JobMetrics>,
    controller: JobController,
    rates: Mutex<Rates>,
    savepoints: Mutex<HashMap<String, SavepointOperation>>,
    /// Default savepoint folder (`execution.checkpointing.savepoint-dir`).
    savepoint_dir: Option<String>,
}

impl JobEntry {
    pub fn status(&self) -> JobStatus {
        match self.metrics.ended() {
            Some(("FINISHED", _)) => JobStatus::Finished,
            Some(("CANCELED", _)) => JobStatus::Canceled,
            Some(_) => JobStatus::Failed,
            None if self.metrics.is_restarting() => JobStatus::Restarting,
            None => JobStatus::Running,
        }
    }

    pub fn end_ms(&self) -> Option<u64> {
        self.metrics.ended().map(|(_, t)| t)
    }

    fn rates(&self) -> Rates {
        self.rates.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Per-second rates of one subtask over the last sampling interval.
#[derive(Debug, Clone, Copy, Default)]
pub struct TaskRates {
    pub records_in_per_s: f64,
    pub records_out_per_s: f64,
    pub busy_ms_per_s: f64,
    pub backpressured_ms_per_s: f64,
    pub idle_ms_per_s: f64,
}

/// One point of a job's charts.
#[derive(Debug, Clone, Copy)]
pub struct ChartPoint {
    pub at_ms: u64,
    /// Rows/s read by the sources and taken by the sinks.
    pub in_per_s: f64,
    pub out_per_s: f64,
    /// Processing time minus the lowest watermark of the job's tasks, ms (none before a
    /// watermark).
    pub watermark_lag_ms: Option<i64>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Rates {
    last: Option<(std::time::Instant, Vec<Vec<TaskSample>>)>,
    /// Per vertex, per subtask.
    tasks: Vec<Vec<TaskRates>>,
    chart: VecDeque<ChartPoint>,
}

impl Rates {
    /// The rates of subtask `s` of vertex `v` (zero before two samples).
    pub(crate) fn task(&self, v: usize, s: usize) -> TaskRates {
        self.tasks
            .get(v)
            .and_then(|r| r.get(s))
            .copied()
            .unwrap_or_default()
    }
}

/// A task manager (a worker, or this process), as `/taskmanagers` shows it.
#[derive(Debug, Clone)]
pub struct TaskManagerInfo {
    pub id: String,
    /// Where it is reached (a worker's data endpoint, `host:port`).
    pub address: String,
    pub slots: usize,
    pub free_slots: usize,
    /// When it was last heard from, ms since the epoch.
    pub last_heartbeat_ms: u64,
}

/// The workers a coordinator runs its jobs on.
pub trait Workers: Send + Sync {
    fn task_managers(&self) -> Vec<TaskManagerInfo>;
    /// Where each subtask of each vertex of a running job runs (worker addresses).
    fn placement(&self, job_id: &str) -> Option<Vec<Vec<String>>>;
}

/// The jobs of this process (a coordinator: of its cluster).
#[derive(Default)]
pub struct Jobs {
    entries: RwLock<Vec<Arc<JobEntry>>>,
    /// A coordinator's workers; without them, this process is the one task manager.
    workers: std::sync::OnceLock<Arc<dyn Workers>>,
}

impl Jobs {
    /// Registers a started job.
    pub fn add(
        &self,
        id: String,
        name: String,
        metrics: Arc<JobMetrics>,
        controller: JobController,
        savepoint_dir: Option<String>,
    ) -> Arc<JobEntry> {
        let entry = Arc::new(JobEntry {
            id,
            name,
            metrics,
            controller,
            rates: Mutex::new(Rates::default()),
            savepoints: Mutex::new(HashMap::new()),
            savepoint_dir,
        });
        self.entries
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(entry.clone());
        entry
    }

    pub fn all(&self) -> Vec<Arc<JobEntry>> {
        self.entries
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn get(&self, id: &str) -> Option<Arc<JobEntry>> {
        self.all().into_iter().find(|j| j.id == id)
    }

    /// Makes the jobs a coordinator's: `/taskmanagers` lists its workers and a
    /// subtask's details name the worker it runs on.
    pub fn set_workers(&self, workers: Arc<dyn Workers>) {
        let _ = self.workers.set(workers);
    }

    /// The task managers: a coordinator's workers, or this process, whose slots are its
    /// cores and which its running jobs share as Flink's slot sharing does (a job takes
    /// as many slots as its largest parallelism).
    pub fn task_managers(&self) -> Vec<TaskManagerInfo> {
        if let Some(w) = self.workers.get() {
            return w.task_managers();
        }
        let slots = std::thread::available_parallelism().map_or(1, |n| n.get());
        let taken: usize = self
            .all()
            .iter()
            .filter(|j| j.end_ms().is_none())
            .map(|j| {
                let vertices = j.metrics.vertices();
                vertices.iter().map(|v| v.parallelism).max().unwrap_or(0)
            })
            .sum();
        vec![TaskManagerInfo {
            id: "local".into(),
            address: "localhost".into(),
            slots,
            free_slots: slots.saturating_sub(taken),
            last_heartbeat_ms: weir_common::now_ms(),
        }]
    }

    /// On a coordinator, the workers the subtasks of vertex `v` of a job run on (none
    /// once the job ended); `None` in a process that runs its jobs itself.
    pub(crate) fn hosts(&self, job_id: &str, v: usize) -> Option<Vec<String>> {
        let workers = self.workers.get()?;
        Some(
            workers
                .placement(job_id)
                .and_then(|p| p.get(v).cloned())
                .unwrap_or_default(),
        )
    }

    /// Samples every running job's counters and updates its rates and chart.
    pub fn sample(&self) {
        let now = std::time::Instant::now();
        let wall = weir_common::now_ms();
        for job in self.all() {
            if job.end_ms().is_some() {
                continue;
            }
            let vertices = job.metrics.vertices();
            let samples: Vec<Vec<TaskSample>> = vertices
                .iter()
                .map(|v| v.subtasks.iter().map(|t| t.sample()).collect())
                .collect();
            let mut rates = job.rates.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((then, before)) = &rates.last {
                let secs = now.duration_since(*then).as_secs_f64().max(1e-3);
                let per_s = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs;
                let ms_per_s = |a: u64, b: u64| a.saturating_sub(b) as f64 / 1e6 / secs;
                rates.tasks = samples
                    .iter()
                    .zip(before)
                    .map(|(now, before)| {
                        now.iter()
                            .zip(before)
                            .map(|(n, b)| TaskRates {
                                records_in_per_s: per_s(n.records_in, b.records_in),
                                records_out_per_s: per_s(n.records_out, b.records_out),
                                busy_ms_per_s: ms_per_s(n.busy_ns, b.busy_ns).min(1000.0),
                                backpressured_ms_per_s: ms_per_s(
                                    n.backpressured_ns,
                                    b.backpressured_ns,
                                )
                                .min(1000.0),
                                idle_ms_per_s: ms_per_s(n.idle_ns, b.idle_ns).min(1000.0),
                            })
                            .collect()
                    })
                    .collect();
                let sources = job.metrics.sources();
                let sinks = job.metrics.sinks();
                let sum = |which: &[usize], f: fn(&TaskRates) -> f64| -> f64 {
                    which
                        .iter()
                        .filter_map(|v| rates.tasks.get(*v))
                        .flatten()
                        .map(f)
                        .sum()
                };
                let point = ChartPoint {
                    at_ms: wall,
                    in_per_s: sum(&sources, |r| r.records_in_per_s),
                    out_per_s: sum(&sinks, |r| r.records_out_per_s),
                    watermark_lag_ms: watermark_lag(&samples, wall),
                };
                rates.chart.push_back(point);
                while rates.chart.len() > CHART_POINTS {
                    rates.chart.pop_front();
                }
            }
            rates.last = Some((now, samples));
        }
    }
}

/// Processing time minus the lowest current watermark of the job's tasks that have one
/// (finished tasks, whose watermark is the end of time, do not count).
fn watermark_lag(samples: &[Vec<TaskSample>], now_ms: u64) -> Option<i64> {
    samples
        .iter()
        .flatten()
        .filter(|t| !t.finished)
        .filter_map(|t| t.output_watermark.or(t.input_watermark))
        .filter(|w| *w != weir_common::MAX_WATERMARK)
        .min()
        .map(|w| now_ms as i64 - w)
}

/// Listens on `host:port` (the setting `key` asked for it) and serves `app` there.
async fn serve(
    host: &str,
    port: u16,
    key: &str,
    app: axum::Router,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind((host, port))
        .await
        .map_err(|e| Error::config(format!("{key}: cannot listen on {host}:{port}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::External(e.to_string()))?;
    let key = key.to_string();
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!("the server of {key} stopped: {e}");
        }
    });
    Ok((addr, task))
}

/// The REST/dashboard server and the Prometheus endpoint of one process.
pub struct WebServer {
    /// Where the REST API and dashboard listen (`rest.port`).
    pub rest: Option<SocketAddr>,
    /// Where Prometheus scrapes (`metrics.reporter.prom.port`).
    pub prometheus: Option<SocketAddr>,
    pub jobs: Arc<Jobs>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for WebServer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl WebServer {
    /// Starts what `config` asks for (`rest.port`, `metrics.reporter.prom.port`, both on
    /// `rest.bind-address`); `None` when it asks for neither. Port 0 picks a free port.
    pub async fn start(config: &weir_common::Config) -> Result<Option<WebServer>> {
        let (rest_port, prom_port) = (config.rest_port(), config.prometheus_port());
        if rest_port.is_none() && prom_port.is_none() {
            return Ok(None);
        }
        let host = config.rest_bind_address();
        let jobs = Arc::new(Jobs::default());
        let mut tasks = Vec::new();
        let mut rest = None;
        if let Some(port) = rest_port {
            let (addr, task) = serve(&host, port, "rest.port", rest::router(jobs.clone())).await?;
            rest = Some(addr);
            tasks.push(task);
        }
        let mut prometheus = None;
        if let Some(port) = prom_port {
            let app = prometheus::router(jobs.clone());
            let (addr, task) = serve(&host, port, "metrics.reporter.prom.port", app).await?;
            prometheus = Some(addr);
            tasks.push(task);
        }
        let sampled = jobs.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            loop {
                tick.tick().await;
                sampled.sample();
            }
        }));
        Ok(Some(WebServer {
            rest,
            prometheus,
            jobs,
            tasks,
        }))
    }
}
