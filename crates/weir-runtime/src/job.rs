//! Starting a job: chaining, restore, each attempt's tasks (built in `attempt`, here or
//! on a cluster's workers) and coordinator, and the handle that watches them. A task
//! failure cancels every task of the attempt; the job's [`RestartStrategy`] then decides
//! whether it runs again, from its latest
//! completed checkpoint (sinks abort what the failed attempt left open and commit again
//! what it had not yet committed, exactly as after a crash and `--restore latest`).

use crate::attempt::{AttemptContext, Part, build_tasks, checkpoint_storage, remote_parts};
use crate::coordinator::{Command, Coordinator, CoordinatorConfig, VertexInfo};
use crate::graph::JobGraph;
use crate::lease::Lease;
use crate::metrics::JobMetrics;
use crate::plan::upstream_tasks;
use crate::remote::{AttemptSpec, Cluster};
use crate::restore::{check_earlier_output, fingerprint, latest_of_job, lineage, resolve_restore};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use weir_common::{Backoff, CheckpointId, Error, JobId, RestartStrategy, Result};

/// Where to restore from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreFrom {
    /// The newest completed checkpoint under the checkpoint folder.
    Latest,
    /// A checkpoint or savepoint folder (or its `_metadata`).
    Path(String),
}

/// How to run a job.
#[derive(Debug, Clone)]
pub struct JobOptions {
    pub job_id: JobId,
    pub checkpoint_interval: Option<Duration>,
    pub checkpoint_timeout: Duration,
    pub min_pause: Duration,
    pub retained: usize,
    pub checkpoints_after_tasks_finish: bool,
    /// Incremental checkpoints (`execution.checkpointing.incremental`; see
    /// [`crate::storage`]).
    pub incremental: bool,
    /// Folder or URL of checkpoints; `None` keeps them in memory.
    pub checkpoint_dir: Option<String>,
    pub restore: Option<RestoreFrom>,
    pub max_parallelism: usize,
    /// Messages buffered per channel before the sender waits (back-pressure).
    pub channel_capacity: usize,
    /// A source subtask that emitted nothing for this long is idle: its watermark stops
    /// holding back the watermark downstream (`table.exec.source.idle-timeout`).
    pub source_idle_timeout: Option<Duration>,
    /// See [`crate::lease`] (`execution.checkpointing.lease-timeout`).
    pub lease_timeout: Duration,
    /// What a failure does (`restart-strategy.*`).
    pub restart: RestartStrategy,
    /// Per-subtask byte counts and busy/idle/back-pressured time (`metrics.task.detailed`).
    pub detailed_metrics: bool,
}

impl Default for JobOptions {
    fn default() -> Self {
        Self {
            job_id: JobId::new(),
            checkpoint_interval: None,
            checkpoint_timeout: Duration::from_secs(600),
            min_pause: Duration::ZERO,
            retained: 1,
            checkpoints_after_tasks_finish: true,
            incremental: true,
            checkpoint_dir: None,
            restore: None,
            max_parallelism: 128,
            channel_capacity: 8,
            source_idle_timeout: None,
            lease_timeout: Duration::from_secs(30),
            restart: RestartStrategy::None,
            detailed_metrics: true,
        }
    }
}

impl JobOptions {
    /// Options from a [`weir_common::Config`].
    pub fn from_config(config: &weir_common::Config) -> Self {
        Self {
            checkpoint_interval: config.checkpoint_interval(),
            checkpoint_timeout: config.checkpoint_timeout(),
            min_pause: config.checkpoint_min_pause(),
            retained: config.num_retained_checkpoints(),
            checkpoints_after_tasks_finish: config.checkpoints_after_tasks_finish(),
            incremental: config.incremental_checkpoints(),
            checkpoint_dir: config.checkpoint_dir(),
            max_parallelism: config.max_parallelism(),
            source_idle_timeout: config.source_idle_timeout(),
            lease_timeout: config.lease_timeout(),
            restart: config.restart_strategy(),
            detailed_metrics: config.detailed_task_metrics(),
            ..Self::default()
        }
    }
}

/// How a job ended.
#[derive(Debug, Clone)]
pub struct JobOutcome {
    pub job_id: JobId,
    pub checkpoints_completed: u64,
    /// Location of the last completed checkpoint.
    pub last_checkpoint: Option<String>,
    /// Location of the checkpoint the job restored from.
    pub restored_from: Option<String>,
    /// Restarts after failures (see [`RestartStrategy`]).
    pub restarts: u64,
}

/// A running job.
pub struct JobHandle {
    pub job_id: JobId,
    pub metrics: Arc<JobMetrics>,
    /// Where the job restored from, if it did.
    pub restored_from: Option<String>,
    commands: mpsc::Sender<Command>,
    join: tokio::task::JoinHandle<Result<JobOutcome>>,
}

impl JobHandle {
    /// Waits for the job to end.
    pub async fn wait(mut self) -> Result<JobOutcome> {
        self.finished().await
    }

    /// Waits for the job to end, keeping the handle (to [`cancel`](Self::cancel) the job
    /// when the wait is given up, e.g. in a `select!`). Once it has returned, do not call
    /// it again.
    pub async fn finished(&mut self) -> Result<JobOutcome> {
        match (&mut self.join).await {
            Ok(r) => r,
            Err(e) if e.is_cancelled() => Err(Error::Cancelled),
            Err(e) => Err(Error::internal(format!("job supervisor panicked: {e}"))),
        }
    }

    /// Triggers a checkpoint and waits for it to complete.
    pub async fn checkpoint(&self) -> Result<CheckpointId> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Checkpoint { reply: tx })
            .await
            .map_err(|_| Error::Checkpoint("the job has ended".into()))?;
        rx.await
            .map_err(|_| Error::Checkpoint("the job has ended".into()))?
    }

    /// Stops the job with a savepoint under `dir` (FLIP-147's protocol). With `drain`
    /// sources end their input (MAX watermark, `end_input`, `finish`), everything is
    /// committed and the job ends for good; without, operators are not finished and the job
    /// can later resume from the savepoint exactly. Returns the savepoint's location; the
    /// job ends once every task closed. If the savepoint fails the job keeps its state and
    /// the error says why.
    pub async fn stop_with_savepoint(&self, drain: bool, dir: &str) -> Result<String> {
        self.controller().stop_with_savepoint(drain, dir).await
    }

    /// A cheap handle for sending commands (checkpoint, stop) from another task.
    pub fn controller(&self) -> JobController {
        JobController {
            commands: self.commands.clone(),
            abort: Arc::new(self.join.abort_handle()),
        }
    }

    /// Cancels the job: tasks stop at once, nothing more is committed.
    pub fn cancel(&self) {
        self.join.abort();
    }

    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }
}

/// Sends commands to a running job; obtained from [`JobHandle::controller`].
#[derive(Clone)]
pub struct JobController {
    commands: mpsc::Sender<Command>,
    abort: Arc<tokio::task::AbortHandle>,
}

impl JobController {
    /// Cancels the job (see [`JobHandle::cancel`]).
    pub fn cancel(&self) {
        self.abort.abort();
    }

    /// See [`JobHandle::stop_with_savepoint`].
    pub async fn stop_with_savepoint(&self, drain: bool, dir: &str) -> Result<String> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::StopWithSavepoint {
                drain,
                dir: dir.to_string(),
                reply: tx,
            })
            .await
            .map_err(|_| Error::Checkpoint("the job has ended".into()))?;
        rx.await
            .map_err(|_| Error::Checkpoint("the job has ended".into()))?
    }
}

/// Starts `graph`. Vertices connected by forward edges of equal parallelism are chained.
///
/// With a checkpoint folder the run first claims it ([`Lease`]); a folder another run
/// holds is an error naming that run. An error while the first attempt is set up (a bad
/// option, a missing bucket, a checkpoint that cannot restore) is returned here; failures
/// of the running job go through `opts.restart`.
pub async fn start(graph: JobGraph, opts: JobOptions) -> Result<JobHandle> {
    start_on(graph, opts, None).await
}

/// Starts `graph` with its tasks on the workers of `cluster`; this process runs the
/// job's checkpoint coordinator and supervises its attempts (see [`crate::remote`]).
/// Checkpoints must go to a folder every worker reaches.
pub async fn start_on_cluster(
    graph: JobGraph,
    opts: JobOptions,
    cluster: Arc<dyn Cluster>,
) -> Result<JobHandle> {
    if opts.checkpoint_dir.is_none() {
        return Err(Error::config(
            "a job on a cluster needs execution.checkpointing.dir (--checkpoint-dir): a \
             folder or bucket every worker reaches, where its tasks write their state",
        ));
    }
    start_on(graph, opts, Some(cluster)).await
}

async fn start_on(
    graph: JobGraph,
    opts: JobOptions,
    cluster: Option<Arc<dyn Cluster>>,
) -> Result<JobHandle> {
    let job_fingerprint = fingerprint(&graph);
    let graph = graph.chained();
    let lease = match &opts.checkpoint_dir {
        Some(dir) => Some(Lease::acquire(dir, opts.job_id, opts.lease_timeout).await?),
        None => None,
    };
    let metrics = Arc::new(JobMetrics::default());
    metrics.register_graph(&graph, opts.detailed_metrics);
    let run = Run {
        graph,
        cluster,
        job_fingerprint,
        fence: lease.as_ref().map(Lease::fence).unwrap_or_default(),
        metrics,
        opts,
    };
    let first = run.prepare(run.opts.restore.clone(), true).await?;
    let (cmd_tx, cmd_rx) = mpsc::channel(16);
    let (job_id, metrics) = (run.opts.job_id, run.metrics.clone());
    let restored_from = first.restored_from.clone();
    let join = tokio::spawn(async move {
        // A cancelled job is dropped mid-wait: the guard records that it ended.
        let _ended = EndedGuard(run.metrics.clone());
        let outcome = run.supervise(first, cmd_rx).await;
        run.metrics.set_ended(match &outcome {
            Ok(_) => "FINISHED",
            Err(Error::Cancelled) => "CANCELED",
            Err(_) => "FAILED",
        });
        if let (Some(lease), Ok(_)) = (lease, &outcome) {
            lease.release().await;
        }
        outcome
    });
    Ok(JobHandle {
        job_id,
        metrics,
        restored_from,
        commands: cmd_tx,
        join,
    })
}

/// What stays the same over the attempts of one run of a job.
struct Run {
    graph: JobGraph,
    /// Where the tasks run when not in this process.
    cluster: Option<Arc<dyn Cluster>>,
    job_fingerprint: u64,
    fence: crate::lease::Fence,
    metrics: Arc<JobMetrics>,
    opts: JobOptions,
}

/// One attempt at running the job: its tasks and checkpoint coordinator, ready to go.
struct Attempt {
    /// What must end for the attempt to end: its tasks (see [`Part`]).
    parts: Vec<Part>,
    coordinator: Coordinator,
    /// Commands for this attempt's coordinator.
    commands: mpsc::Sender<Command>,
    restored_from: Option<String>,
}

/// Marks the job `CANCELED` when its supervisor is dropped before it recorded an end.
struct EndedGuard(Arc<JobMetrics>);

impl Drop for EndedGuard {
    fn drop(&mut self) {
        self.0.set_ended("CANCELED");
    }
}

/// Aborts a spawned task when dropped (the job's supervisor was cancelled).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Run {
    /// Runs attempts until one ends well, or a failure the restart strategy does not
    /// restart. Commands from the [`JobHandle`] go to the current attempt.
    async fn supervise(
        &self,
        first: Attempt,
        mut commands: mpsc::Receiver<Command>,
    ) -> Result<JobOutcome> {
        let job_id = self.opts.job_id;
        let restored_from = first.restored_from.clone();
        let mut backoff = Backoff::new(self.opts.restart.clone());
        let mut attempt = Some(first);
        let mut restarts = 0u64;
        loop {
            let result = match attempt.take() {
                Some(a) => Self::run_attempt(a, &mut commands).await,
                None => Err(Error::internal("no attempt to run")),
            };
            let error = match result {
                Ok(outcome) => {
                    return Ok(JobOutcome {
                        job_id,
                        checkpoints_completed: self.metrics.checkpoints_completed(),
                        last_checkpoint: outcome.last_checkpoint,
                        restored_from,
                        restarts,
                    });
                }
                Err(e) => e,
            };
            // Set up the next attempt; a failure to do so (the checkpoint store is
            // down) counts as one more failure.
            let mut error = Some(error);
            while let Some(e) = error.take() {
                self.metrics.record_failure(&e);
                let delay = if matches!(e, Error::Cancelled) || self.fence.check().is_err() {
                    None
                } else {
                    backoff.on_failure(Instant::now())
                };
                let Some(delay) = delay else {
                    if restarts > 0 || !matches!(self.opts.restart, RestartStrategy::None) {
                        tracing::warn!(
                            "job {job_id} failed and is not restarted again (restart strategy \
                             {}, {restarts} restarts so far): {e}",
                            self.opts.restart
                        );
                    }
                    return Err(e);
                };
                tracing::warn!(
                    "job {job_id} failed: {e}; restarting from its latest completed checkpoint \
                     in {} ms (restart {}; restart strategy {})",
                    delay.as_millis(),
                    restarts + 1,
                    self.opts.restart
                );
                self.metrics.restarting(true);
                tokio::time::sleep(delay).await;
                restarts += 1;
                self.metrics.count_restart();
                match self.restart_point(restored_from.as_deref()).await {
                    Ok(from) => {
                        let shown = from
                            .as_ref()
                            .map(|f| format!("checkpoint '{f}'"))
                            .unwrap_or_else(|| "the beginning (no checkpoint yet)".into());
                        match self.prepare(from.map(RestoreFrom::Path), false).await {
                            Ok(a) => {
                                tracing::info!("job {job_id} restarted from {shown}");
                                attempt = Some(a);
                            }
                            Err(e) => error = Some(e),
                        }
                    }
                    Err(e) => error = Some(e),
                }
                self.metrics.restarting(false);
            }
        }
    }

    /// Where a restart resumes: the newest sound checkpoint this job completed, else what
    /// the run started from (a checkpoint or savepoint given, or the beginning).
    async fn restart_point(&self, started_from: Option<&str>) -> Result<Option<String>> {
        let base = self
            .opts
            .checkpoint_dir
            .as_deref()
            .unwrap_or(MEMORY_CHECKPOINTS);
        if let Some(location) = latest_of_job(base, self.opts.job_id).await? {
            return Ok(Some(location));
        }
        Ok(started_from.map(str::to_string))
    }

    /// Runs one attempt to its end: the coordinator's outcome, or the first failure
    /// (which cancels the attempt's other tasks).
    async fn run_attempt(
        attempt: Attempt,
        commands: &mut mpsc::Receiver<Command>,
    ) -> Result<crate::coordinator::CoordinatorOutcome> {
        let mut set = JoinSet::new();
        for part in attempt.parts {
            set.spawn(part);
        }
        let mut coordinator = AbortOnDrop(tokio::spawn(attempt.coordinator.run()));
        let mut outcome: Option<crate::coordinator::CoordinatorOutcome> = None;
        let mut coordinator_done = false;
        let mut failure: Option<Error> = None;
        let mut commands_open = true;
        let fail = |failure: &mut Option<Error>, e: Error| {
            let replace = match failure {
                None => true,
                Some(Error::Cancelled) => !matches!(e, Error::Cancelled),
                Some(_) => false,
            };
            if replace {
                *failure = Some(e);
            }
        };
        while !set.is_empty() {
            tokio::select! {
                joined = set.join_next() => {
                    let result = match joined {
                        Some(Ok(r)) => r,
                        Some(Err(e)) if e.is_cancelled() => Err(Error::Cancelled),
                        Some(Err(e)) => Err(Error::internal(format!("a task panicked: {e}"))),
                        None => Ok(()),
                    };
                    if let Err(e) = result {
                        fail(&mut failure, e);
                        set.abort_all();
                        coordinator.0.abort();
                    }
                }
                done = &mut coordinator.0, if !coordinator_done => {
                    coordinator_done = true;
                    match done {
                        Ok(Ok(o)) => outcome = Some(o),
                        Ok(Err(e)) => {
                            fail(&mut failure, e);
                            set.abort_all();
                        }
                        Err(e) if e.is_cancelled() => {}
                        Err(e) => {
                            fail(&mut failure, Error::internal(format!("checkpoint coordinator failed: {e}")));
                            set.abort_all();
                        }
                    }
                }
                cmd = commands.recv(), if commands_open => match cmd {
                    // A command the attempt's coordinator cannot take any more is
                    // dropped: its caller hears that the job ended.
                    Some(cmd) => { let _ = attempt.commands.send(cmd).await; }
                    None => commands_open = false,
                },
            }
        }
        // Tasks whose coordinator ended hear it as a closed control channel (Cancelled),
        // and one of them may be joined before the coordinator's own error: that error
        // (a task that could not write its state) is the attempt's cause, and decides
        // whether it restarts.
        if matches!(failure, Some(Error::Cancelled))
            && !coordinator_done
            && let Ok(Err(e)) = (&mut coordinator.0).await
        {
            fail(&mut failure, e);
        }
        if let Some(e) = failure {
            return Err(e);
        }
        if !coordinator_done {
            outcome =
                Some((&mut coordinator.0).await.map_err(|e| {
                    Error::internal(format!("checkpoint coordinator failed: {e}"))
                })??);
        }
        outcome
            .ok_or_else(|| Error::internal("the checkpoint coordinator ended without an outcome"))
    }

    /// Builds the tasks and the coordinator of an attempt that restores from `restore`
    /// (nothing: from scratch). `first` is the run's first attempt, which checks for
    /// earlier runs' output. On a cluster the tasks run on workers: the attempt's parts are
    /// the workers' shares, and the coordinator reaches their tasks through the cluster.
    async fn prepare(&self, restore: Option<RestoreFrom>, first: bool) -> Result<Attempt> {
        let (graph, metrics) = (&self.graph, &self.metrics);
        let opts = JobOptions {
            restore,
            ..self.opts.clone()
        };
        let storage = checkpoint_storage(&opts)?;
        // Placed first: an attempt without enough workers fails before reading state.
        let placement = match &self.cluster {
            Some(cluster) => Some(
                cluster.place(
                    &graph
                        .vertices
                        .iter()
                        .map(|v| (v.name.clone(), v.parallelism))
                        .collect::<Vec<_>>(),
                )?,
            ),
            None => None,
        };
        let (restored, mut loaded) = match resolve_restore(graph, &opts).await? {
            Some((r, loaded)) => (Some(r), loaded),
            None => (None, Vec::new()),
        };
        if let Some(r) = &restored {
            let (id, location) = (r.metadata.checkpoint_id.0, r.location.clone());
            metrics.update_checkpoints(|h| {
                h.restored += 1;
                h.latest_restored = Some((id, location));
            });
        }
        let context = AttemptContext {
            job_id: opts.job_id,
            attempt: uuid::Uuid::new_v4(),
            lineage: lineage(restored.as_ref(), &opts, self.job_fingerprint),
            job_fingerprint: self.job_fingerprint,
            fence: self.fence.clone(),
            metrics: metrics.clone(),
            opts: opts.clone(),
            checkpoint_requests: Arc::new(tokio::sync::Notify::new()),
        };
        if restored.is_none() && first {
            check_earlier_output(graph, &opts, |v, s| context.info(v, s)).await?;
        }
        // Checkpoint ids keep growing over attempts (as in Flink): a failed attempt may
        // have left a partial folder for the id after the one restored.
        let restored_id = restored.as_ref().map(|r| r.metadata.checkpoint_id.0);
        let triggered = metrics.last_triggered();
        let next_id = restored_id.unwrap_or(0).max(triggered) + 1;
        let aborted = ((restored_id.unwrap_or(0) + 1)..=triggered)
            .map(CheckpointId)
            .collect();

        let (event_tx, event_rx) = mpsc::unbounded_channel();
        let (cmd_tx, cmd_rx) = mpsc::channel(16);
        let own_restored = restored
            .as_ref()
            .filter(|r| r.metadata.job_id == opts.job_id.to_string());

        let (parts, controls) = match (&self.cluster, placement) {
            (Some(cluster), Some(placement)) => {
                let spec = AttemptSpec {
                    job_id: opts.job_id,
                    attempt: context.attempt,
                    lineage: context.lineage.clone(),
                    fingerprint: self.job_fingerprint,
                    restore: restored.as_ref().map(|r| r.location.clone()),
                    workers: placement.workers.clone(),
                    placement: placement.of.clone(),
                };
                remote_parts(
                    cluster.as_ref(),
                    spec,
                    &event_tx,
                    metrics,
                    &context.checkpoint_requests,
                )
            }
            _ => {
                let (tasks, controls) = build_tasks(
                    graph,
                    &context,
                    restored.as_ref(),
                    &mut loaded,
                    &storage,
                    &event_tx,
                    None,
                )?;
                let parts: Vec<Part> = tasks
                    .into_iter()
                    .map(|t| Box::pin(t.run()) as Part)
                    .collect();
                let controls = controls
                    .into_iter()
                    .map(|v| {
                        v.into_iter()
                            .map(|c| c.expect("every task runs here"))
                            .collect()
                    })
                    .collect();
                (parts, controls)
            }
        };
        drop(event_tx);

        let coordinator = Coordinator {
            job_id: opts.job_id,
            lineage: context.lineage.clone(),
            fence: self.fence.clone(),
            vertices: graph
                .vertices
                .iter()
                .map(|v| VertexInfo {
                    uid: v.uid.clone(),
                    name: v.name.clone(),
                    parallelism: v.parallelism,
                    has_sink: v.operators.iter().any(|o| o.is_sink()),
                })
                .collect(),
            upstream: upstream_tasks(graph),
            controls,
            storage,
            requests: context.checkpoint_requests.clone(),
            config: CoordinatorConfig {
                interval: opts.checkpoint_interval,
                timeout: opts.checkpoint_timeout,
                min_pause: opts.min_pause,
                retained: opts.retained,
                checkpoints_after_finish: opts.checkpoints_after_tasks_finish,
                max_parallelism: opts.max_parallelism,
            },
            metrics: metrics.clone(),
            next_id,
            events: event_rx,
            commands: cmd_rx,
            aborted,
            completed_before: restored_id
                .filter(|_| own_restored.is_some())
                .map(CheckpointId)
                .into_iter()
                .collect(),
            shared_refs: Default::default(),
        };
        Ok(Attempt {
            parts,
            coordinator,
            commands: cmd_tx,
            restored_from: restored.as_ref().map(|r| r.location.clone()),
        })
    }
}

/// Where checkpoints go when no folder is set: this process's memory.
pub(crate) const MEMORY_CHECKPOINTS: &str = "memory://weir-checkpoints";
