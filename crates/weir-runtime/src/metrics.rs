//! Counters shared between tasks and whoever watches the job (the CLI's progress line, the
//! REST API, the Prometheus endpoint): job-wide totals in [`JobMetrics`], one
//! [`TaskMetrics`] per subtask of every (chained) vertex, and the checkpoint history.
//! Everything is a relaxed atomic or a short lock: reading never stops a task.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Job-wide counters; updated with relaxed atomics.
#[derive(Debug, Default)]
pub struct JobMetrics {
    /// Rows produced by sources.
    pub rows_in: AtomicU64,
    /// Rows received by sinks.
    pub rows_out: AtomicU64,
    /// Id of the last completed checkpoint (0: none).
    pub last_checkpoint: AtomicU64,
    /// Number of completed checkpoints.
    pub checkpoints_completed: AtomicU64,
    /// Duration of the last completed checkpoint, in milliseconds.
    pub last_checkpoint_ms: AtomicU64,
    /// Bytes of operator state in memory, summed over tasks as of their last snapshot.
    pub state_bytes: AtomicU64,
    /// The highest `state_bytes` seen.
    pub state_bytes_peak: AtomicU64,
    /// Records (or fields) sources skipped as unreadable (`*.ignore-parse-errors`);
    /// Flink's `numRecordsInErrors`.
    pub records_in_errors: AtomicU64,
    /// Id of the last checkpoint triggered, over every attempt (ids keep growing).
    pub last_triggered: AtomicU64,
    /// Restarts after failures (Flink's `numRestarts`).
    pub restarts: AtomicU64,
    /// The job failed and waits to restart.
    pub restarting: AtomicBool,
    /// The last failure: when (ms since the epoch) and its message.
    pub last_failure: Mutex<Option<(u64, String)>>,
    /// The failures of the job, newest last (at most [`HISTORY`]).
    pub failures: Mutex<VecDeque<(u64, String)>>,
    /// Since the last failure, while no sink has taken a record again.
    recovering_since: Mutex<Option<std::time::Instant>>,
    recovering: AtomicBool,
    /// Time from the last failure to the first record a sink took after it, in ms, plus
    /// one (0: no recovery yet).
    last_recovery_ms: AtomicU64,
    /// The (chained) vertices and edges of the job, with each subtask's metrics.
    graph: RwLock<Vec<VertexMetrics>>,
    edges: RwLock<Vec<EdgeInfo>>,
    /// Checkpoints: counts and the most recent ones.
    checkpoints: Mutex<CheckpointHistory>,
    /// When the job started (ms since the epoch).
    pub started_ms: AtomicU64,
    /// How the job ended (`FINISHED`, `FAILED`, `CANCELED`) and when (ms since the epoch).
    ended: Mutex<Option<(&'static str, u64)>>,
}

/// How many failures and checkpoints the history keeps.
pub const HISTORY: usize = 50;

/// One vertex of the running job, as shown to users.
#[derive(Debug, Clone)]
pub struct VertexMetrics {
    pub uid: String,
    pub name: String,
    pub parallelism: usize,
    /// The vertex reads a source / ends in a sink.
    pub is_source: bool,
    pub is_sink: bool,
    pub subtasks: Vec<Arc<TaskMetrics>>,
}

/// An edge between two vertices (indexes into [`JobMetrics::vertices`]).
#[derive(Debug, Clone)]
pub struct EdgeInfo {
    pub from: usize,
    pub to: usize,
    /// `FORWARD`, `HASH[..]`, `REBALANCE`, `BROADCAST`.
    pub partitioning: String,
}

/// What one subtask did. Times are cumulative nanoseconds: rates per second are computed
/// by whoever samples them twice.
#[derive(Debug)]
pub struct TaskMetrics {
    /// Rows that came into the task: from its input channels, or from its source.
    pub records_in: AtomicU64,
    /// In-memory size of those rows' Arrow buffers.
    pub bytes_in: AtomicU64,
    /// Rows sent downstream (a sink task: rows its sink took).
    pub records_out: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Time spent handling input, timers and control messages (back-pressure included).
    pub active_ns: AtomicU64,
    /// Time spent waiting for output channels that were full (Flink's back-pressure).
    pub backpressured_ns: AtomicU64,
    /// Time spent waiting for something to do.
    pub idle_ns: AtomicU64,
    /// The task's combined input watermark and the last watermark it sent (`i64::MIN`:
    /// none yet).
    pub input_watermark: AtomicI64,
    pub output_watermark: AtomicI64,
    /// Bytes of operator state as of the last snapshot.
    pub state_bytes: AtomicU64,
    /// Time from the first barrier of the last checkpoint to the last (alignment), ms.
    pub alignment_ms: AtomicU64,
    /// `true` once the task ended its input (FLIP-147 `FINISHED`).
    pub finished: AtomicBool,
    /// Whether bytes and busy/idle/back-pressured time are measured
    /// (`metrics.task.detailed`); records, watermarks and state always are.
    pub detailed: bool,
}

impl Default for TaskMetrics {
    fn default() -> Self {
        Self {
            records_in: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            records_out: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            active_ns: AtomicU64::new(0),
            backpressured_ns: AtomicU64::new(0),
            idle_ns: AtomicU64::new(0),
            input_watermark: AtomicI64::new(i64::MIN),
            output_watermark: AtomicI64::new(i64::MIN),
            state_bytes: AtomicU64::new(0),
            alignment_ms: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            detailed: true,
        }
    }
}

/// A point-in-time copy of a [`TaskMetrics`] (what a worker reports of its tasks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskSample {
    pub records_in: u64,
    pub bytes_in: u64,
    pub records_out: u64,
    pub bytes_out: u64,
    pub busy_ns: u64,
    pub backpressured_ns: u64,
    pub idle_ns: u64,
    pub input_watermark: Option<i64>,
    pub output_watermark: Option<i64>,
    pub state_bytes: u64,
    pub alignment_ms: u64,
    pub finished: bool,
}

impl TaskMetrics {
    pub fn sample(&self) -> TaskSample {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let wm = |a: &AtomicI64| Some(a.load(Ordering::Relaxed)).filter(|w| *w != i64::MIN);
        let backpressured_ns = load(&self.backpressured_ns);
        TaskSample {
            records_in: load(&self.records_in),
            bytes_in: load(&self.bytes_in),
            records_out: load(&self.records_out),
            bytes_out: load(&self.bytes_out),
            busy_ns: load(&self.active_ns).saturating_sub(backpressured_ns),
            backpressured_ns,
            idle_ns: load(&self.idle_ns),
            input_watermark: wm(&self.input_watermark),
            output_watermark: wm(&self.output_watermark),
            state_bytes: load(&self.state_bytes),
            alignment_ms: load(&self.alignment_ms),
            finished: self.finished.load(Ordering::Relaxed),
        }
    }

    /// Adds what a copy of this task elsewhere (on a worker) did between two of its
    /// samples: counters grow by the difference, so they keep counting across attempts
    /// as a task's own do; watermarks, state size, alignment and `finished` take the
    /// newer sample's values.
    pub fn advance(&self, before: &TaskSample, now: &TaskSample) {
        let add = |a: &AtomicU64, now: u64, before: u64| {
            a.fetch_add(now.saturating_sub(before), Ordering::Relaxed);
        };
        add(&self.records_in, now.records_in, before.records_in);
        add(&self.bytes_in, now.bytes_in, before.bytes_in);
        add(&self.records_out, now.records_out, before.records_out);
        add(&self.bytes_out, now.bytes_out, before.bytes_out);
        add(
            &self.active_ns,
            now.busy_ns + now.backpressured_ns,
            before.busy_ns + before.backpressured_ns,
        );
        add(
            &self.backpressured_ns,
            now.backpressured_ns,
            before.backpressured_ns,
        );
        add(&self.idle_ns, now.idle_ns, before.idle_ns);
        let wm = |a: &AtomicI64, w: Option<i64>| a.store(w.unwrap_or(i64::MIN), Ordering::Relaxed);
        wm(&self.input_watermark, now.input_watermark);
        wm(&self.output_watermark, now.output_watermark);
        self.state_bytes.store(now.state_bytes, Ordering::Relaxed);
        self.alignment_ms.store(now.alignment_ms, Ordering::Relaxed);
        self.finished.store(now.finished, Ordering::Relaxed);
    }

    pub(crate) fn count_in(&self, batch: &arrow::array::RecordBatch) {
        self.records_in
            .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
        if self.detailed {
            self.bytes_in
                .fetch_add(batch.get_array_memory_size() as u64, Ordering::Relaxed);
        }
    }

    pub(crate) fn count_out(&self, batch: &arrow::array::RecordBatch) {
        self.records_out
            .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
        if self.detailed {
            self.bytes_out
                .fetch_add(batch.get_array_memory_size() as u64, Ordering::Relaxed);
        }
    }

    pub(crate) fn add_ns(counter: &AtomicU64, d: std::time::Duration) {
        counter.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }
}

/// The state of one checkpoint, as Flink's REST API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointStatus {
    InProgress,
    Completed,
    Failed,
}

impl CheckpointStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointStatus::InProgress => "IN_PROGRESS",
            CheckpointStatus::Completed => "COMPLETED",
            CheckpointStatus::Failed => "FAILED",
        }
    }
}

/// One checkpoint or savepoint.
#[derive(Debug, Clone)]
pub struct CheckpointStats {
    pub id: u64,
    pub status: CheckpointStatus,
    pub savepoint: bool,
    /// When it was triggered (ms since the epoch).
    pub trigger_ms: u64,
    /// Trigger to completion (or failure), ms.
    pub duration_ms: u64,
    /// Bytes of state: the state files and the shared objects they refer to.
    pub state_size: u64,
    /// Bytes written for this checkpoint (less than `state_size` when incremental).
    pub checkpointed_size: u64,
    pub acknowledged: usize,
    pub subtasks: usize,
    /// Why it failed.
    pub failure: Option<String>,
}

/// Counts and the most recent checkpoints.
#[derive(Debug, Clone, Default)]
pub struct CheckpointHistory {
    pub completed: u64,
    pub failed: u64,
    pub restored: u64,
    /// Over all completed checkpoints of the job: the sum and the most of their durations
    /// (ms), the bytes they wrote, and the largest state one referred to.
    pub total_duration_ms: u64,
    pub max_duration_ms: u64,
    pub total_written: u64,
    pub max_state_size: u64,
    /// Newest last, at most [`HISTORY`].
    pub recent: VecDeque<CheckpointStats>,
    /// The checkpoint restored from, at the latest (re)start.
    pub latest_restored: Option<(u64, String)>,
}

impl JobMetrics {
    pub fn rows_in(&self) -> u64 {
        self.rows_in.load(Ordering::Relaxed)
    }
    pub fn rows_out(&self) -> u64 {
        self.rows_out.load(Ordering::Relaxed)
    }
    pub fn last_checkpoint(&self) -> Option<u64> {
        Some(self.last_checkpoint.load(Ordering::Relaxed)).filter(|c| *c > 0)
    }
    pub fn checkpoints_completed(&self) -> u64 {
        self.checkpoints_completed.load(Ordering::Relaxed)
    }
    /// Operator state in memory (bytes), as of each task's last snapshot.
    pub fn state_bytes(&self) -> u64 {
        self.state_bytes.load(Ordering::Relaxed)
    }
    /// The most operator state (bytes) seen at any snapshot.
    pub fn state_bytes_peak(&self) -> u64 {
        self.state_bytes_peak.load(Ordering::Relaxed)
    }
    /// Records (or fields) skipped as unreadable.
    pub fn records_in_errors(&self) -> u64 {
        self.records_in_errors.load(Ordering::Relaxed)
    }
    pub fn count_records_in_errors(&self, n: u64) {
        self.records_in_errors.fetch_add(n, Ordering::Relaxed);
    }
    pub fn last_triggered(&self) -> u64 {
        self.last_triggered.load(Ordering::Relaxed)
    }
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }
    pub fn is_restarting(&self) -> bool {
        self.restarting.load(Ordering::Relaxed)
    }
    /// The last failure's time (ms since the epoch) and message.
    pub fn last_failure(&self) -> Option<(u64, String)> {
        self.last_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
    pub(crate) fn record_failure(&self, e: &weir_common::Error) {
        let failure = (weir_common::now_ms(), e.to_string());
        let mut all = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        all.push_back(failure.clone());
        while all.len() > HISTORY {
            all.pop_front();
        }
        *self.last_failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(failure);
        *self
            .recovering_since
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(std::time::Instant::now());
        self.recovering.store(true, Ordering::Release);
    }

    /// A sink took records: the first time after a failure ends the recovery.
    pub(crate) fn records_taken(&self) {
        if self.recovering.load(Ordering::Relaxed) && self.recovering.swap(false, Ordering::AcqRel)
        {
            let since = self
                .recovering_since
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(since) = since {
                let ms = since.elapsed().as_millis() as u64;
                self.last_recovery_ms.store(ms + 1, Ordering::Relaxed);
                tracing::info!("job processing again {ms} ms after its last failure");
            }
        }
    }

    /// Time from the last failure to the first record a sink took after it.
    pub fn last_recovery(&self) -> Option<std::time::Duration> {
        match self.last_recovery_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(std::time::Duration::from_millis(ms - 1)),
        }
    }

    /// How the job ended (`FINISHED`, `FAILED` or `CANCELED`) and when; `None` while it
    /// runs.
    pub fn ended(&self) -> Option<(&'static str, u64)> {
        *self.ended.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn set_ended(&self, status: &'static str) {
        let mut ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        if ended.is_none() {
            *ended = Some((status, weir_common::now_ms()));
        }
    }

    /// The job's failures, oldest first.
    pub fn failures(&self) -> Vec<(u64, String)> {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Records the job's (chained) graph; subtask metrics stay the same over restarts.
    pub(crate) fn register_graph(&self, graph: &crate::graph::JobGraph, detailed: bool) {
        let vertices = graph
            .vertices
            .iter()
            .map(|v| VertexMetrics {
                uid: v.uid.clone(),
                name: v.name.clone(),
                parallelism: v.parallelism,
                is_source: v.source.is_some(),
                is_sink: v.operators.last().is_some_and(|o| o.is_sink()),
                subtasks: (0..v.parallelism)
                    .map(|_| {
                        Arc::new(TaskMetrics {
                            detailed,
                            ..TaskMetrics::default()
                        })
                    })
                    .collect(),
            })
            .collect();
        *self.graph.write().unwrap_or_else(|e| e.into_inner()) = vertices;
        *self.edges.write().unwrap_or_else(|e| e.into_inner()) = graph
            .edges
            .iter()
            .map(|e| EdgeInfo {
                from: e.from,
                to: e.to,
                partitioning: e.partitioning.label(),
            })
            .collect();
        self.started_ms
            .store(weir_common::now_ms(), Ordering::Relaxed);
    }

    /// The metrics of subtask `s` of vertex `v` of the registered graph.
    pub fn subtask(&self, v: usize, s: usize) -> Option<Arc<TaskMetrics>> {
        self.graph
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(v)
            .and_then(|v| v.subtasks.get(s).cloned())
    }

    /// The metrics of subtask `s` of vertex `v` (fresh ones if the graph is unknown).
    pub(crate) fn task(&self, v: usize, s: usize) -> Arc<TaskMetrics> {
        self.subtask(v, s).unwrap_or_default()
    }

    /// The job's vertices, in topological order, with their subtasks' metrics.
    pub fn vertices(&self) -> Vec<VertexMetrics> {
        self.graph.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Indexes of the vertices that read sources.
    pub fn sources(&self) -> Vec<usize> {
        let g = self.graph.read().unwrap_or_else(|e| e.into_inner());
        (0..g.len()).filter(|v| g[*v].is_source).collect()
    }

    /// Indexes of the vertices that end in sinks.
    pub fn sinks(&self) -> Vec<usize> {
        let g = self.graph.read().unwrap_or_else(|e| e.into_inner());
        (0..g.len()).filter(|v| g[*v].is_sink).collect()
    }

    /// The job's edges.
    pub fn edges(&self) -> Vec<EdgeInfo> {
        self.edges.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The checkpoint counts and recent checkpoints.
    pub fn checkpoint_history(&self) -> CheckpointHistory {
        self.checkpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Applies `f` to the checkpoint history.
    pub(crate) fn update_checkpoints(&self, f: impl FnOnce(&mut CheckpointHistory)) {
        let mut h = self.checkpoints.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut h);
        while h.recent.len() > HISTORY {
            h.recent.pop_front();
        }
    }
    pub(crate) fn restarting(&self, yes: bool) {
        self.restarting.store(yes, Ordering::Relaxed);
    }
    pub(crate) fn count_restart(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }
    /// Replaces one task's share of `state_bytes` (`old` by `new`).
    pub fn report_state(&self, old: u64, new: u64) {
        let total = if new >= old {
            self.state_bytes.fetch_add(new - old, Ordering::Relaxed) + (new - old)
        } else {
            self.state_bytes.fetch_sub(old - new, Ordering::Relaxed) - (old - new)
        };
        self.state_bytes_peak.fetch_max(total, Ordering::Relaxed);
    }
}
