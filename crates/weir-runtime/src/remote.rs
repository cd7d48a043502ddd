//! Running an attempt's tasks in other processes (a cluster; the transport and the
//! processes are the `weir-cluster` crate's).
//!
//! The runtime stays the same on a cluster: tasks, alignment, the finishing protocol, the
//! checkpoint coordinator and the two-phase-commit sinks do not know where their peers
//! run. What changes is wiring:
//! * The coordinating process places every subtask on a worker ([`Cluster::place`]), runs
//!   the checkpoint coordinator and no task; each worker's share of the attempt is one
//!   [`Part`] it waits for ([`Cluster::run_part`]), and its control messages and the
//!   tasks' events cross processes in order, per task ([`Control`], [`TaskEvent`] are
//!   serializable for that).
//! * Each worker compiles the same job (the fingerprint must match), restores the same
//!   checkpoint and builds only its tasks ([`run_part`]). A channel between two subtasks
//!   of one worker is a local channel as in a single process; a channel between workers
//!   is a local channel at each end, joined by a [`Transport`] that keeps its messages in
//!   order and its back-pressure.

pub use crate::attempt::Part;
use crate::attempt::{AttemptContext, Placed, build_tasks};
use crate::graph::JobGraph;
use crate::job::{JobOptions, RestoreFrom};
use crate::message::Message;
use crate::metrics::JobMetrics;
use crate::restore::{fingerprint, resolve_restore};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use weir_common::{Error, JobId, Result};

pub use crate::plan::TaskRef;
pub use crate::task::{Control, TaskEvent};

/// One channel of an attempt: an edge of the chained graph, and its sending and receiving
/// subtasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChannelId {
    pub edge: usize,
    pub from: usize,
    pub to: usize,
}

/// Carries the channels of an attempt that cross processes. Messages of one channel
/// arrive in the order they were sent; a receiver that does not take them holds the
/// sender back (its local channel fills, then the transport's window).
pub trait Transport: Send + Sync {
    /// What this process's subtask `channel.from` sends on `channel`, for worker `to`.
    fn outgoing(&self, channel: ChannelId, to: usize, messages: mpsc::Receiver<Message>);
    /// Where the messages of `channel`, sent by another worker, go.
    fn incoming(&self, channel: ChannelId, messages: mpsc::Sender<Message>);
}

/// Where the two ends of channels between processes meet: the receiving end is
/// registered under its key, and whoever brings the sending end (a connection from
/// another worker, which may come before the receiving task was built) takes it, once.
pub struct Rendezvous<K, V> {
    registered: std::sync::Mutex<std::collections::HashMap<K, V>>,
    changed: tokio::sync::Notify,
}

impl<K, V> Default for Rendezvous<K, V> {
    fn default() -> Self {
        Self {
            registered: Default::default(),
            changed: Default::default(),
        }
    }
}

impl<K: Eq + std::hash::Hash, V> Rendezvous<K, V> {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<K, V>> {
        self.registered.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn register(&self, key: K, value: V) {
        self.lock().insert(key, value);
        self.changed.notify_waiters();
    }

    /// Forgets the ends nobody took whose keys `keep` refuses (a cancelled attempt's).
    pub fn retain(&self, mut keep: impl FnMut(&K) -> bool) {
        self.lock().retain(|k, _| keep(k));
    }

    /// Takes what is registered under `key`, waiting for it up to `within`.
    pub async fn take(&self, key: &K, within: std::time::Duration) -> Option<V> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(value) = self.lock().remove(key) {
                return Some(value);
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return None;
            }
        }
    }
}

/// Where the subtasks of an attempt run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The workers of the attempt, by an address the cluster knows them by.
    pub workers: Vec<String>,
    /// The worker (an index into `workers`) of each subtask, per vertex of the chained
    /// graph.
    pub of: Vec<Vec<usize>>,
}

/// What a worker needs to run its part of an attempt, besides the job itself (which it
/// compiles from the same definition).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptSpec {
    pub job_id: JobId,
    pub attempt: uuid::Uuid,
    pub lineage: String,
    /// Of the job graph: a worker that compiled another graph refuses the attempt.
    pub fingerprint: u64,
    /// The checkpoint the attempt restores (a location `RestoredCheckpoint` opens).
    pub restore: Option<String>,
    pub workers: Vec<String>,
    /// See [`Placement::of`].
    pub placement: Vec<Vec<usize>>,
}

/// The coordinating process's view of a cluster.
pub trait Cluster: Send + Sync {
    /// Places the subtasks of a graph whose vertices (chained) have these names and
    /// parallelisms on the workers there are now; an error when there are not enough.
    fn place(&self, vertices: &[(String, usize)]) -> Result<Placement>;

    /// Starts the share of the attempt that `spec` places on worker `worker` and ends
    /// with it: `Ok` once its tasks all closed, an error when one failed or the worker
    /// was lost. `link` carries what passes between the part and the coordinator's side
    /// of the job. Dropping the part cancels it.
    fn run_part(&self, worker: usize, spec: AttemptSpec, link: PartLink) -> Part;
}

/// What passes between a part on a worker and the coordinator's side of the job.
pub struct PartLink {
    /// The coordinator's messages for the part's tasks, to deliver in order per task.
    pub controls: Vec<(TaskRef, mpsc::UnboundedReceiver<Control>)>,
    /// Where the tasks' events go, in the order each task sent them.
    pub events: mpsc::UnboundedSender<TaskEvent>,
    /// The job's metrics: the rows the tasks count are added to them.
    pub metrics: Arc<JobMetrics>,
    /// Notified when a task asks for an early checkpoint
    /// ([`crate::TaskInfo::request_checkpoint`]).
    pub checkpoint_requests: Arc<tokio::sync::Notify>,
}

/// The worker's end of a [`PartLink`].
pub struct WorkerLink {
    /// The coordinator's messages for the part's tasks; when it closes (the coordinator
    /// cancelled the attempt) the tasks are cancelled.
    pub controls: mpsc::UnboundedReceiver<(TaskRef, Control)>,
    pub events: mpsc::UnboundedSender<TaskEvent>,
    /// The part's own metrics, which the tasks count into.
    pub metrics: Arc<JobMetrics>,
    /// Notified when a task here asks for an early checkpoint; the worker tells the
    /// coordinator.
    pub checkpoint_requests: Arc<tokio::sync::Notify>,
}

/// Spreads subtasks over workers with `slots[w]` slots each, as Flink's slot sharing
/// does: subtask `i` of every vertex goes to slot `i`, so a job needs as many slots as
/// its largest parallelism, and slots are numbered across workers in turn (slot 0 on the
/// first worker, slot 1 on the second, …) so that subtasks spread over the workers.
pub fn spread(parallelism: &[usize], slots: &[usize]) -> Result<Vec<Vec<usize>>> {
    let needed = parallelism.iter().copied().max().unwrap_or(0);
    let total: usize = slots.iter().sum();
    if needed > total {
        return Err(Error::config(format!(
            "the job needs {needed} task slots (its largest parallelism), the cluster has \
             {total} on {} worker(s); start more workers, give them more slots \
             (taskmanager.numberOfTaskSlots) or lower the parallelism",
            slots.len()
        )));
    }
    let mut order = Vec::with_capacity(needed);
    let mut used = vec![0usize; slots.len()];
    while order.len() < needed {
        for (w, &n) in slots.iter().enumerate() {
            if used[w] < n && order.len() < needed {
                used[w] += 1;
                order.push(w);
            }
        }
    }
    Ok(parallelism.iter().map(|&p| order[..p].to_vec()).collect())
}

/// Runs the tasks that `spec` places on worker `me`: `graph` is the job as this worker
/// compiled it (not chained), `opts` its options (the job id and restore point come from
/// `spec`). Ends when they all closed, or with the first failure, which cancels the rest.
/// The part talks to the coordinator through `link`.
pub async fn run_part(
    graph: JobGraph,
    opts: JobOptions,
    spec: AttemptSpec,
    me: usize,
    transport: Arc<dyn Transport>,
    link: WorkerLink,
) -> Result<()> {
    let WorkerLink {
        mut controls,
        events,
        metrics,
        checkpoint_requests,
    } = link;
    let job_fingerprint = fingerprint(&graph);
    if job_fingerprint != spec.fingerprint {
        return Err(Error::config(
            "this worker compiled the job into another graph than the coordinator did (a \
             different Weir version, or a table or function that differs here)",
        ));
    }
    let graph = graph.chained();
    let shape: Vec<usize> = graph.vertices.iter().map(|v| v.parallelism).collect();
    let placed_shape: Vec<usize> = spec.placement.iter().map(Vec::len).collect();
    if shape != placed_shape
        || spec
            .placement
            .iter()
            .flatten()
            .any(|&w| w >= spec.workers.len())
    {
        return Err(Error::internal(format!(
            "the attempt's placement {placed_shape:?} does not fit the job's vertices {shape:?}"
        )));
    }
    let opts = JobOptions {
        job_id: spec.job_id,
        restore: spec.restore.clone().map(RestoreFrom::Path),
        ..opts
    };
    let storage = crate::attempt::checkpoint_storage(&opts)?;
    let (restored, mut loaded) = match resolve_restore(&graph, &opts).await? {
        Some((r, loaded)) => (Some(r), loaded),
        None => (None, Vec::new()),
    };
    metrics.register_graph(&graph, opts.detailed_metrics);
    let context = AttemptContext {
        job_id: spec.job_id,
        attempt: spec.attempt,
        lineage: spec.lineage.clone(),
        job_fingerprint,
        // The coordinator holds the claim on the checkpoint folder; a task here commits
        // only what a checkpoint it completed covers.
        fence: Default::default(),
        metrics,
        opts,
        checkpoint_requests,
    };
    let placed = Placed {
        of: &spec.placement,
        me,
        transport: transport.as_ref(),
    };
    let (tasks, task_controls) = build_tasks(
        &graph,
        &context,
        restored.as_ref(),
        &mut loaded,
        &storage,
        &events,
        Some(&placed),
    )?;
    drop(events);
    let router = tokio::spawn(async move {
        while let Some(((v, s), control)) = controls.recv().await {
            if let Some(Some(tx)) = task_controls.get(v).and_then(|c| c.get(s)) {
                let _ = tx.send(control);
            }
        }
    });
    let mut set = JoinSet::new();
    for t in tasks {
        set.spawn(t.run());
    }
    let mut result = Ok(());
    while let Some(joined) = set.join_next().await {
        let r = match joined {
            Ok(r) => r,
            Err(e) if e.is_cancelled() => Err(Error::Cancelled),
            Err(e) => Err(Error::internal(format!("a task panicked: {e}"))),
        };
        if let Err(e) = r {
            set.abort_all();
            if result.is_ok() || matches!(result, Err(Error::Cancelled)) {
                result = Err(e);
            }
        }
    }
    router.abort();
    result
}

/// (De)serializes an error as its text: a worker's failure reaches the coordinator as
/// what it said.
pub mod error_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use weir_common::Error;

    pub fn serialize<S: Serializer>(e: &Error, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&e.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Error, D::Error> {
        Ok(Error::Remote(String::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subtasks_spread_over_workers_slot_by_slot() {
        // Three workers of one slot: subtask i on worker i, for every vertex.
        assert_eq!(
            spread(&[3, 3, 1], &[1, 1, 1]).unwrap(),
            vec![vec![0, 1, 2], vec![0, 1, 2], vec![0]]
        );
        // Two workers of two slots: slots go 0, 1, 0, 1.
        assert_eq!(
            spread(&[4, 2], &[2, 2]).unwrap(),
            vec![vec![0, 1, 0, 1], vec![0, 1]]
        );
        // Uneven slots: the second worker's spare slots come last.
        assert_eq!(spread(&[4], &[1, 3]).unwrap(), vec![vec![0, 1, 1, 1]]);
        let e = spread(&[4], &[1, 2]).unwrap_err().to_string();
        assert!(
            e.contains("needs 4 task slots") && e.contains("has 3 on 2 worker(s)"),
            "{e}"
        );
    }
}
