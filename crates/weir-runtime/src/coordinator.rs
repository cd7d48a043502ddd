//! The checkpoint coordinator: triggers checkpoints (periodically, on request, and as
//! soon as tasks reach end of data), collects acknowledgements, writes `_metadata`,
//! notifies tasks of completion or abortion, and retains a bounded number of checkpoints.
//!
//! At most one checkpoint is in flight. With finished tasks (FLIP-147) it triggers the
//! running tasks that have no running upstream task and waits for every running task.
//! A task that closes while a checkpoint waits for it declines that checkpoint; the next
//! one is triggered at once.

use crate::checkpoint::{CheckpointMetadata, SubtaskEntry, SubtaskStatus, VertexEntry};
use crate::message::{Barrier, CheckpointKind};
use crate::metrics::JobMetrics;
use crate::plan::{TaskRef, plan_trigger};
use crate::storage::CheckpointStorage;
use crate::task::{Control, TaskEvent};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::mpsc::{Receiver, UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;
use tokio::time::Instant;
use weir_common::{CheckpointId, Error, JobId, Result};

/// Requests to the coordinator from a job handle.
pub enum Command {
    /// Take a checkpoint now; answers with its id once it completed.
    Checkpoint {
        reply: oneshot::Sender<Result<CheckpointId>>,
    },
    /// Stop the job with a savepoint written under `dir`; answers with its location.
    StopWithSavepoint {
        drain: bool,
        dir: String,
        reply: oneshot::Sender<Result<String>>,
    },
}

/// A requested stop-with-savepoint.
struct StopRequest {
    drain: bool,
    dir: String,
    reply: oneshot::Sender<Result<String>>,
}

pub(crate) struct CoordinatorConfig {
    pub interval: Option<Duration>,
    pub timeout: Duration,
    pub min_pause: Duration,
    pub retained: usize,
    pub checkpoints_after_finish: bool,
    pub max_parallelism: usize,
}

pub(crate) struct VertexInfo {
    pub uid: String,
    pub name: String,
    pub parallelism: usize,
    /// Its chain ends in a sink, whose output the final checkpoint commits.
    pub has_sink: bool,
}

/// What a task acknowledged for a checkpoint.
struct Acked {
    status: SubtaskStatus,
    file: String,
    state: crate::storage::WrittenState,
    union_state: bool,
}

struct Pending {
    id: CheckpointId,
    started: Instant,
    acks: HashMap<TaskRef, Acked>,
    waiting: Vec<TaskRef>,
    replies: Vec<oneshot::Sender<Result<CheckpointId>>>,
    stop: Option<StopRequest>,
}

pub(crate) struct Coordinator {
    pub job_id: JobId,
    /// See [`CheckpointMetadata::lineage`].
    pub lineage: String,
    /// Checked before a checkpoint is made to exist: an attempt that lost its claim on
    /// the checkpoint folder completes no checkpoint.
    pub fence: crate::lease::Fence,
    pub vertices: Vec<VertexInfo>,
    pub upstream: Vec<Vec<Vec<TaskRef>>>,
    pub controls: Vec<Vec<UnboundedSender<Control>>>,
    pub storage: CheckpointStorage,
    pub config: CoordinatorConfig,
    pub metrics: Arc<JobMetrics>,
    pub next_id: u64,
    pub events: UnboundedReceiver<TaskEvent>,
    pub commands: Receiver<Command>,
    /// Early checkpoints asked for by operators ([`crate::TaskInfo::request_checkpoint`]).
    pub requests: Arc<tokio::sync::Notify>,
    /// Aborted checkpoints whose folders a late task may still write to. They go once a
    /// later checkpoint completes (every running task has then finished with them: tasks
    /// write their state in barrier order) or the job ends.
    pub aborted: Vec<CheckpointId>,
    /// Completed checkpoints of this job from an earlier attempt, oldest first: deleted
    /// like this attempt's own once more than the retained number exist.
    pub completed_before: Vec<CheckpointId>,
    /// The shared state objects each checkpoint completed by this attempt refers to
    /// (those of earlier attempts are read from their `_metadata` when needed).
    pub shared_refs: HashMap<CheckpointId, HashSet<String>>,
}

/// What the coordinator reports when the job ends.
#[derive(Debug, Clone, Default)]
pub struct CoordinatorOutcome {
    pub checkpoints_completed: u64,
    pub last_checkpoint: Option<String>,
}

impl Coordinator {
    pub async fn run(mut self) -> Result<CoordinatorOutcome> {
        let mut closed: Vec<Vec<bool>> = self
            .vertices
            .iter()
            .map(|v| vec![false; v.parallelism])
            .collect();
        // Tasks that reached the end of their input.
        let mut ended = closed.clone();
        let pipelines = crate::plan::pipeline_of(&self.upstream);
        let mut pending: Option<Pending> = None;
        let mut waiting_replies: Vec<oneshot::Sender<Result<CheckpointId>>> = Vec::new();
        let mut stop_request: Option<StopRequest> = None;
        let mut completed: VecDeque<CheckpointId> =
            std::mem::take(&mut self.completed_before).into();
        let mut outcome = CoordinatorOutcome::default();
        let mut asap = false;
        // An operator asked for a checkpoint before the interval is up.
        let mut early = false;
        let mut last_trigger = Instant::now();
        let mut last_complete = Instant::now() - self.config.min_pause;
        let far = Duration::from_secs(365 * 24 * 3600);

        loop {
            if closed.iter().all(|v| v.iter().all(|c| *c)) {
                for r in waiting_replies.drain(..) {
                    let _ = r.send(Err(Error::Checkpoint("the job finished".into())));
                }
                if let Some(p) = pending.take() {
                    self.abort(p, "the job finished").await;
                }
                self.remove_aborted(CheckpointId(u64::MAX)).await;
                // Shared state of aborted checkpoints is kept while tasks run (a task may
                // refer to it again); now nothing does.
                self.release_shared(None, &completed).await;
                return Ok(outcome);
            }
            let deadline = match &pending {
                Some(p) => p.started + self.config.timeout,
                None if asap || !waiting_replies.is_empty() || stop_request.is_some() => {
                    Instant::now()
                }
                None => match self.config.interval {
                    Some(_) if early => last_complete + self.config.min_pause,
                    Some(i) => (last_trigger + i).max(last_complete + self.config.min_pause),
                    None => Instant::now() + far,
                },
            };
            tokio::select! {
                ev = self.events.recv() => {
                    let Some(ev) = ev else { return Ok(outcome) };
                    match ev {
                        TaskEvent::Ack { task, id, status, state_file, state, union_state } => {
                            let done = match pending.as_mut() {
                                Some(p) if p.id == id => {
                                    let acked = Acked { status, file: state_file, state, union_state };
                                    p.acks.insert(task, acked);
                                    p.waiting.retain(|t| *t != task);
                                    p.waiting.is_empty()
                                }
                                _ => false,
                            };
                            if done {
                                let p = pending.take().expect("pending checkpoint");
                                self.complete(p, &closed, &mut completed, &mut outcome).await?;
                                last_complete = Instant::now();
                            }
                        }
                        TaskEvent::EndOfData { task } => {
                            ended[task.0][task.1] = true;
                            // Trigger the final checkpoint now (FLIP-147 without waiting
                            // for the interval) unless the pending one will include the
                            // task's finished state anyway: when a task with a sink ends
                            // (its output is committed at once), or every task of its
                            // pipeline (the connected part of the job graph) has. A task
                            // without a sink that ends before the rest of its pipeline (a
                            // source) waits for the next periodic checkpoint, as in Flink:
                            // nothing of its own awaits a commit, and a checkpoint then
                            // would write the whole state of the operators still working
                            // through their input (q20: 1.3 GB of join rows, dropped
                            // seconds later). Without periodic checkpoints, only once the
                            // pipeline has ended: a checkpoint taken when the first subtask
                            // ends would commit its siblings' output so far, and a failure
                            // after it would leave that part visible.
                            let pipeline = pipelines[task.0];
                            let pipeline_ended = (0..ended.len())
                                .filter(|v| pipelines[*v] == pipeline)
                                .all(|v| ended[v].iter().all(|e| *e));
                            let sink_ended =
                                self.config.interval.is_some() && self.vertices[task.0].has_sink;
                            if pending.as_ref().is_none_or(|p| p.acks.contains_key(&task))
                                && (sink_ended || pipeline_ended)
                            {
                                asap = true;
                            }
                        }
                        TaskEvent::Declined { task, id, error } => {
                            // The task could not write its state: the attempt fails with
                            // that error, as when writing it was part of the task's work
                            // (the job logs it).
                            tracing::debug!(checkpoint = id.0, subtask = ?task, "a task could not write its checkpoint state");
                            if let Some(p) = pending.take_if(|p| p.id == id) {
                                self.abort(p, "a task could not write its state").await;
                            }
                            return Err(error);
                        }
                        TaskEvent::Closed { task } => {
                            closed[task.0][task.1] = true;
                            if pending.as_ref().is_some_and(|p| p.waiting.contains(&task)) {
                                let p = pending.take().expect("pending checkpoint");
                                self.abort(p, "a task finished while the checkpoint was in flight").await;
                                asap = true;
                            }
                        }
                    }
                }
                _ = self.requests.notified(), if self.config.interval.is_some() && !early => {
                    early = true;
                }
                cmd = self.commands.recv() => match cmd {
                    Some(Command::Checkpoint { reply }) => waiting_replies.push(reply),
                    Some(Command::StopWithSavepoint { drain, dir, reply }) => {
                        if stop_request.is_some() {
                            let _ = reply.send(Err(Error::Checkpoint("a stop is already in progress".into())));
                        } else if !self.config.checkpoints_after_finish {
                            let _ = reply.send(Err(Error::Checkpoint(
                                "stop-with-savepoint needs execution.checkpointing.checkpoints-after-tasks-finish = true".into(),
                            )));
                        } else {
                            stop_request = Some(StopRequest { drain, dir, reply });
                        }
                    }
                    None => {}
                },
                _ = tokio::time::sleep_until(deadline) => {
                    if let Some(p) = pending.take() {
                        self.abort(p, "timed out").await;
                        asap = true;
                        continue;
                    }
                    let any_closed = closed.iter().any(|v| v.iter().any(|c| *c));
                    if any_closed && !self.config.checkpoints_after_finish {
                        // The behaviour before FLIP-147: no checkpoints once a task finished.
                        asap = false;
                        early = false;
                        last_trigger = Instant::now();
                        for r in waiting_replies.drain(..) {
                            let _ = r.send(Err(Error::Checkpoint(
                                "checkpoints are disabled after tasks finished".into(),
                            )));
                        }
                        continue;
                    }
                    asap = false;
                    early = false;
                    last_trigger = Instant::now();
                    pending = self.trigger(&closed, std::mem::take(&mut waiting_replies), stop_request.take());
                }
            }
        }
    }

    fn trigger(
        &mut self,
        closed: &[Vec<bool>],
        replies: Vec<oneshot::Sender<Result<CheckpointId>>>,
        stop: Option<StopRequest>,
    ) -> Option<Pending> {
        let plan = plan_trigger(&self.upstream, closed);
        if plan.wait_for.is_empty() {
            if let Some(stop) = stop {
                let _ = stop
                    .reply
                    .send(Err(Error::Checkpoint("the job has finished".into())));
            }
            return None;
        }
        let id = CheckpointId(self.next_id);
        self.next_id += 1;
        self.metrics
            .last_triggered
            .fetch_max(id.0, Ordering::Relaxed);
        let kind = if stop.is_some() {
            CheckpointKind::Savepoint
        } else {
            CheckpointKind::Checkpoint
        };
        let barrier = Barrier { id, kind };
        let control = match &stop {
            Some(s) => {
                let mode = if s.drain {
                    crate::message::StopMode::Drain
                } else {
                    crate::message::StopMode::NoDrain
                };
                Control::Stop(barrier, mode)
            }
            None => Control::Trigger(barrier),
        };
        tracing::debug!(
            checkpoint = id.0,
            triggered = plan.trigger.len(),
            "trigger checkpoint"
        );
        for (v, s) in &plan.trigger {
            let _ = self.controls[*v][*s].send(control.clone());
        }
        let subtasks = plan.wait_for.len();
        let savepoint = stop.is_some();
        self.metrics.update_checkpoints(|h| {
            h.recent.push_back(crate::metrics::CheckpointStats {
                id: id.0,
                status: crate::metrics::CheckpointStatus::InProgress,
                savepoint,
                trigger_ms: weir_common::now_ms(),
                duration_ms: 0,
                state_size: 0,
                checkpointed_size: 0,
                acknowledged: 0,
                subtasks,
                failure: None,
            })
        });
        Some(Pending {
            id,
            started: Instant::now(),
            acks: HashMap::new(),
            waiting: plan.wait_for,
            replies,
            stop,
        })
    }

    async fn complete(
        &mut self,
        p: Pending,
        closed: &[Vec<bool>],
        completed: &mut VecDeque<CheckpointId>,
        outcome: &mut CoordinatorOutcome,
    ) -> Result<()> {
        // FLIP-147: union list state cannot be redistributed once part of its operator has
        // closed while the rest runs (the closed subtasks' share would be lost). Finished
        // subtasks with union state stay open, their state in every checkpoint, until
        // their whole vertex has finished (`may_close` below).
        let mut may_close = vec![true; self.vertices.len()];
        for (v, info) in self.vertices.iter().enumerate() {
            let subtasks: Vec<(SubtaskStatus, bool)> = (0..info.parallelism)
                .map(|s| match p.acks.get(&(v, s)) {
                    Some(a) => (a.status, a.union_state),
                    None => (SubtaskStatus::Closed, false),
                })
                .collect();
            may_close[v] = !crate::plan::union_state_held(&subtasks);
            if crate::plan::union_state_blocked(&subtasks) {
                let why = format!(
                    "operator '{}' keeps union list state and has finished only partly",
                    info.name
                );
                self.abort(p, &why).await;
                return Ok(());
            }
        }
        let vertices = self
            .vertices
            .iter()
            .enumerate()
            .map(|(v, info)| VertexEntry {
                uid: info.uid.clone(),
                name: info.name.clone(),
                parallelism: info.parallelism,
                subtasks: (0..info.parallelism)
                    .map(|s| match p.acks.get(&(v, s)) {
                        Some(a) => SubtaskEntry {
                            subtask: s,
                            status: a.status,
                            state_file: Some(a.file.clone()),
                            state_digest: Some(a.state.digest.clone()),
                            shared: a.state.shared.clone(),
                        },
                        None => {
                            debug_assert!(closed[v][s]);
                            SubtaskEntry {
                                subtask: s,
                                status: SubtaskStatus::Closed,
                                state_file: None,
                                state_digest: None,
                                shared: Vec::new(),
                            }
                        }
                    })
                    .collect(),
            })
            .collect();
        let meta = CheckpointMetadata {
            format_version: crate::checkpoint::FORMAT_VERSION,
            job_id: self.job_id.to_string(),
            lineage: self.lineage.clone(),
            checkpoint_id: p.id,
            savepoint: false,
            completed_at_ms: weir_common::now_ms(),
            max_parallelism: self.config.max_parallelism,
            vertices,
            checksum: None,
        };
        let mut savepoint_location = None;
        if let Some(dir) = p.stop.as_ref().map(|s| s.dir.clone()) {
            let mut sp = meta.clone();
            sp.savepoint = true;
            match self.storage.copy_to_savepoint(&sp, &dir).await {
                Ok(location) => savepoint_location = Some(location),
                Err(e) => {
                    let why = format!("cannot write the savepoint: {e}");
                    self.abort(p, &why).await;
                    return Ok(());
                }
            }
        }
        if let Err(e) = self.fence.check() {
            self.abort(p, "this run lost its claim on the checkpoint folder")
                .await;
            return Err(e);
        }
        if let Err(e) = self.storage.write_metadata(&meta).await {
            tracing::warn!("checkpoint {} failed: cannot write _metadata: {e}", p.id);
            self.abort(p, "cannot write _metadata").await;
            return Ok(());
        }
        weir_common::failpoint("after-metadata")?;
        self.metrics
            .last_checkpoint
            .store(p.id.0, Ordering::Relaxed);
        self.metrics
            .checkpoints_completed
            .fetch_add(1, Ordering::Relaxed);
        self.metrics
            .last_checkpoint_ms
            .store(p.started.elapsed().as_millis() as u64, Ordering::Relaxed);
        outcome.checkpoints_completed += 1;
        let state_size = p.acks.values().map(|a| a.state.full_size).sum();
        let written: u64 = p.acks.values().map(|a| a.state.written).sum();
        let acknowledged = p.acks.len();
        let duration_ms = p.started.elapsed().as_millis() as u64;
        self.metrics.update_checkpoints(|h| {
            h.completed += 1;
            h.total_duration_ms += duration_ms;
            h.max_duration_ms = h.max_duration_ms.max(duration_ms);
            h.total_written += written;
            h.max_state_size = h.max_state_size.max(state_size);
            if let Some(c) = h.recent.iter_mut().rev().find(|c| c.id == p.id.0) {
                c.status = crate::metrics::CheckpointStatus::Completed;
                c.duration_ms = duration_ms;
                c.state_size = state_size;
                c.checkpointed_size = written;
                c.acknowledged = acknowledged;
            }
        });
        outcome.last_checkpoint = Some(self.storage.describe(p.id));
        tracing::info!(
            "checkpoint {} complete in {duration_ms} ms ({state_size} bytes of state, {written} written)",
            p.id
        );
        for (v, subtasks) in self.controls.iter().enumerate() {
            for (s, ctl) in subtasks.iter().enumerate() {
                if !closed[v][s] {
                    let _ = ctl.send(Control::Complete {
                        id: p.id,
                        may_close: may_close[v],
                    });
                }
            }
        }
        for r in p.replies {
            let _ = r.send(Ok(p.id));
        }
        if let (Some(stop), Some(location)) = (p.stop, savepoint_location) {
            tracing::info!("savepoint {} written to {location}", p.id);
            let _ = stop.reply.send(Ok(location));
        }
        self.shared_refs
            .insert(p.id, crate::storage::shared_objects(&meta));
        completed.push_back(p.id);
        self.remove_aborted(p.id).await;
        while completed.len() > self.config.retained.max(1) {
            let old = completed.pop_front().expect("non-empty");
            // Known before the checkpoint goes: the shared objects only it refers to go too.
            let refs = self.refs_of(old).await;
            self.shared_refs.remove(&old);
            if let Err(e) = self.storage.discard(old, true).await {
                tracing::warn!("cannot delete old checkpoint {old}: {e}");
            }
            match refs {
                Ok(refs) if refs.is_empty() => {}
                Ok(refs) => self.release_shared(Some(refs), completed).await,
                Err(e) => tracing::warn!("cannot read the shared state of checkpoint {old}: {e}"),
            }
        }
        Ok(())
    }

    /// Deletes shared state objects no retained checkpoint refers to: among `candidates`,
    /// or all of them (`None`, once no task writes any more). Nothing is deleted when the
    /// retained checkpoints cannot be read.
    async fn release_shared(
        &self,
        candidates: Option<HashSet<String>>,
        retained: &VecDeque<CheckpointId>,
    ) {
        let mut keep = HashSet::new();
        for id in retained {
            match self.refs_of(*id).await {
                Ok(refs) => keep.extend(refs),
                Err(e) => {
                    tracing::warn!("cannot read the shared state of checkpoint {id}: {e}");
                    return;
                }
            }
        }
        if let Err(e) = self.storage.delete_shared(candidates, &keep).await {
            tracing::warn!("cannot delete unused shared state: {e}");
        }
    }

    /// The shared state objects completed checkpoint `id` refers to.
    async fn refs_of(&self, id: CheckpointId) -> Result<HashSet<String>> {
        match self.shared_refs.get(&id) {
            Some(refs) => Ok(refs.clone()),
            None => self.storage.shared_refs(id).await,
        }
    }

    async fn abort(&mut self, p: Pending, why: &str) {
        tracing::info!("checkpoint {} aborted: {why}", p.id);
        let duration_ms = p.started.elapsed().as_millis() as u64;
        let acknowledged = p.acks.len();
        self.metrics.update_checkpoints(|h| {
            h.failed += 1;
            if let Some(c) = h.recent.iter_mut().rev().find(|c| c.id == p.id.0) {
                c.status = crate::metrics::CheckpointStatus::Failed;
                c.duration_ms = duration_ms;
                c.acknowledged = acknowledged;
                c.failure = Some(why.to_string());
            }
        });
        for subtasks in &self.controls {
            for ctl in subtasks {
                let _ = ctl.send(Control::Aborted(p.id));
            }
        }
        for r in p.replies {
            let _ = r.send(Err(Error::Checkpoint(format!(
                "checkpoint {} aborted: {why}",
                p.id
            ))));
        }
        if let Some(stop) = p.stop {
            let _ = stop.reply.send(Err(Error::Checkpoint(format!(
                "savepoint {} failed: {why}",
                p.id
            ))));
        }
        let _ = self.storage.discard(p.id, false).await;
        self.aborted.push(p.id);
    }

    /// Removes whatever is left of the aborted checkpoints before `before`, folders included.
    async fn remove_aborted(&mut self, before: CheckpointId) {
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.aborted)
            .into_iter()
            .partition(|id| id.0 < before.0);
        self.aborted = kept;
        for id in gone {
            if let Err(e) = self.storage.discard(id, true).await {
                tracing::warn!("cannot delete aborted checkpoint {id}: {e}");
            }
        }
    }
}
