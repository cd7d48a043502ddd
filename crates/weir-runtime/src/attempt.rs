//! The tasks of one attempt: building them with their channels, restored state and
//! control channels — all of them in one process, or those a cluster placed here — and,
//! on the coordinating process of a cluster, the workers' parts.

use crate::checkpoint::OperatorState;
use crate::exchange::{OutEdge, OutputWriter};
use crate::graph::{JobGraph, Partitioning};
use crate::job::{JobOptions, MEMORY_CHECKPOINTS};
use crate::metrics::JobMetrics;
use crate::operator::TaskInfo;
use crate::plan::redistribute;
use crate::remote::{AttemptSpec, ChannelId, Cluster, PartLink, Transport};
use crate::storage::CheckpointStorage;
use crate::task::{InputChannel, Task};
use std::sync::Arc;
use tokio::sync::mpsc;
use weir_common::{Error, JobId, Result};

/// One part of an attempt the supervisor waits for: a task here, or a worker's share of
/// the tasks on a cluster.
pub type Part = futures::future::BoxFuture<'static, Result<()>>;

pub(crate) fn checkpoint_storage(opts: &JobOptions) -> Result<CheckpointStorage> {
    Ok(CheckpointStorage::at(
        opts.checkpoint_dir.as_deref().unwrap_or(MEMORY_CHECKPOINTS),
        opts.job_id,
    )?
    .incremental(opts.incremental))
}

/// What the tasks of one attempt share.
pub(crate) struct AttemptContext {
    pub job_id: JobId,
    pub attempt: uuid::Uuid,
    pub lineage: String,
    pub job_fingerprint: u64,
    pub fence: crate::lease::Fence,
    pub metrics: Arc<JobMetrics>,
    pub opts: JobOptions,
    pub checkpoint_requests: Arc<tokio::sync::Notify>,
}

impl AttemptContext {
    pub fn info(&self, vertex: &crate::graph::Vertex, subtask: usize) -> TaskInfo {
        TaskInfo {
            job_id: self.job_id,
            attempt: self.attempt,
            lineage: self.lineage.clone(),
            job_fingerprint: self.job_fingerprint,
            fence: self.fence.clone(),
            vertex_uid: vertex.uid.clone(),
            vertex_name: vertex.name.clone(),
            subtask,
            parallelism: vertex.parallelism,
            max_parallelism: self.opts.max_parallelism,
            metrics: self.metrics.clone(),
            source_idle_timeout: self.opts.source_idle_timeout,
            incremental_checkpoints: self.opts.incremental,
            checkpoint_requests: self.checkpoint_requests.clone(),
        }
    }
}

/// Which subtasks run in this process, and how their channels reach the others.
pub(crate) struct Placed<'a> {
    /// The worker of each subtask, per vertex.
    pub of: &'a [Vec<usize>],
    /// This process's worker.
    pub me: usize,
    pub transport: &'a dyn Transport,
}

impl Placed<'_> {
    fn here(&self, v: usize, s: usize) -> bool {
        self.of[v][s] == self.me
    }
}

/// The control senders of an attempt's tasks, per vertex and subtask (`None`: the task
/// runs in another process).
type Controls = Vec<Vec<Option<mpsc::UnboundedSender<crate::task::Control>>>>;

/// Builds the tasks of an attempt that run in this process (all of them, unless
/// `placed` says otherwise): their channels, restored state and control channels.
pub(crate) fn build_tasks(
    graph: &JobGraph,
    context: &AttemptContext,
    restored: Option<&crate::storage::RestoredCheckpoint>,
    loaded: &mut crate::restore::LoadedStates,
    storage: &CheckpointStorage,
    event_tx: &mpsc::UnboundedSender<crate::task::TaskEvent>,
    placed: Option<&Placed<'_>>,
) -> Result<(Vec<Task>, Controls)> {
    let (opts, metrics) = (&context.opts, &context.metrics);
    let here = |v: usize, s: usize| placed.is_none_or(|p| p.here(v, s));
    // Channels: one per (upstream subtask, downstream subtask) pair of every edge. A
    // channel between processes is a local channel at each end, joined by the transport.
    let n = graph.vertices.len();
    let mut out_edges: Vec<Vec<Vec<OutEdge>>> = graph
        .vertices
        .iter()
        .map(|v| (0..v.parallelism).map(|_| Vec::new()).collect())
        .collect();
    let mut in_channels: Vec<Vec<Vec<InputChannel>>> = graph
        .vertices
        .iter()
        .map(|v| (0..v.parallelism).map(|_| Vec::new()).collect())
        .collect();
    for (edge, e) in graph.edges.iter().enumerate() {
        let (fp, tp) = (
            graph.vertices[e.from].parallelism,
            graph.vertices[e.to].parallelism,
        );
        for (s, outs) in out_edges[e.from].iter_mut().enumerate() {
            let targets: Vec<usize> = match e.partitioning {
                Partitioning::Forward => {
                    if fp != tp {
                        return Err(Error::internal(
                            "forward edge between different parallelisms",
                        ));
                    }
                    vec![s]
                }
                _ => (0..tp).collect(),
            };
            let mut senders = Vec::new();
            for t in targets {
                let (sends, receives) = (here(e.from, s), here(e.to, t));
                if !sends && !receives {
                    continue;
                }
                let (tx, rx) = mpsc::channel(opts.channel_capacity.max(1));
                let channel = ChannelId {
                    edge,
                    from: s,
                    to: t,
                };
                match (placed, sends, receives) {
                    (Some(p), true, false) => p.transport.outgoing(channel, p.of[e.to][t], rx),
                    _ => in_channels[e.to][t].push(InputChannel::new(rx, e.input)),
                }
                match (placed, sends, receives) {
                    (Some(p), false, true) => p.transport.incoming(channel, tx),
                    _ => senders.push(tx),
                }
            }
            if here(e.from, s) {
                outs.push(OutEdge {
                    partitioning: e.partitioning.clone(),
                    channels: senders,
                    next: s,
                    max_parallelism: opts.max_parallelism,
                    metrics: metrics.task(e.from, s),
                });
            }
        }
    }

    // The restored checkpoint's shared payloads are in this job's shared folder when
    // the checkpoint is this job's own (a restart): tasks refer to them without writing
    // them again.
    let own_restored = restored.filter(|r| r.metadata.job_id == opts.job_id.to_string());
    let known_shared = Arc::new(crate::storage::shared_payloads(
        own_restored
            .iter()
            .flat_map(|r| &r.metadata.vertices)
            .flat_map(|v| &v.subtasks)
            .flat_map(|s| &s.shared),
    ));
    let mut controls = Vec::with_capacity(n);
    let mut tasks = Vec::new();
    for (v, vertex) in graph.vertices.iter().enumerate() {
        let entry = restored.and_then(|r| r.metadata.vertex(&vertex.uid));
        let finished_on_restore = entry.is_some_and(|e| e.fully_finished());
        // Gather the state of every old subtask, per chain position, and split it anew.
        let (mut source_states, mut op_states) = (None, vec![None; vertex.operators.len()]);
        if restored.is_some() && entry.is_some() {
            let mut src: Vec<OperatorState> = Vec::new();
            let mut ops: Vec<Vec<OperatorState>> = vec![Vec::new(); vertex.operators.len()];
            for snap in std::mem::take(&mut loaded[v]) {
                src.extend(snap.source);
                if snap.operators.len() != ops.len() {
                    return Err(Error::Checkpoint(format!(
                        "checkpoint state of '{}' has {} operators, the job has {}",
                        vertex.name,
                        snap.operators.len(),
                        ops.len()
                    )));
                }
                for (slot, st) in ops.iter_mut().zip(snap.operators) {
                    slot.push(st);
                }
            }
            let corrupt = |e: Error| match e {
                Error::CorruptCheckpoint(m) => {
                    Error::CorruptCheckpoint(format!("state of '{}': {m}", vertex.name))
                }
                e => e,
            };
            source_states = Some(
                redistribute(&src, vertex.parallelism, opts.max_parallelism).map_err(corrupt)?,
            );
            op_states = ops
                .iter()
                .map(|o| {
                    redistribute(o, vertex.parallelism, opts.max_parallelism)
                        .map(Some)
                        .map_err(corrupt)
                })
                .collect::<Result<_>>()?;
        }
        let mut vertex_controls = Vec::new();
        for s in 0..vertex.parallelism {
            if !here(v, s) {
                vertex_controls.push(None);
                continue;
            }
            let info = context.info(vertex, s);
            let source = match &vertex.source {
                Some(f) => Some(f.create(&info, source_states.as_ref().map(|st| st[s].clone()))?),
                None => None,
            };
            let operators = vertex
                .operators
                .iter()
                .map(|f| f.create(&info))
                .collect::<Result<Vec<_>>>()?;
            let restored_ops = op_states
                .iter()
                .map(|o| o.as_ref().map(|st| st[s].clone()))
                .collect();
            let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
            vertex_controls.push(Some(ctl_tx));
            tasks.push(Task {
                info,
                task_ref: (v, s),
                source,
                operators,
                restored: restored_ops,
                finished_on_restore,
                last_is_sink: vertex.operators.last().is_some_and(|o| o.is_sink()),
                inputs: std::mem::take(&mut in_channels[v][s]),
                output: OutputWriter {
                    subtask: s,
                    edges: std::mem::take(&mut out_edges[v][s]),
                    metrics: metrics.task(v, s),
                },
                control: ctl_rx,
                events: event_tx.clone(),
                storage: storage.clone(),
                known_shared: known_shared.clone(),
                checkpoints_after_finish: opts.checkpoints_after_tasks_finish,
                idle_timeout: opts.source_idle_timeout,
                metrics: metrics.task(v, s),
            });
        }
        controls.push(vertex_controls);
    }
    Ok((tasks, controls))
}

/// The parts of an attempt on a cluster, one per worker that runs tasks, and the control
/// senders the coordinator uses for every task.
pub(crate) fn remote_parts(
    cluster: &dyn Cluster,
    spec: AttemptSpec,
    event_tx: &mpsc::UnboundedSender<crate::task::TaskEvent>,
    metrics: &Arc<JobMetrics>,
    checkpoint_requests: &Arc<tokio::sync::Notify>,
) -> (
    Vec<Part>,
    Vec<Vec<mpsc::UnboundedSender<crate::task::Control>>>,
) {
    let mut per_worker: Vec<Vec<_>> = (0..spec.workers.len()).map(|_| Vec::new()).collect();
    let controls = spec
        .placement
        .iter()
        .enumerate()
        .map(|(v, subtasks)| {
            subtasks
                .iter()
                .enumerate()
                .map(|(s, &w)| {
                    let (tx, rx) = mpsc::unbounded_channel();
                    per_worker[w].push(((v, s), rx));
                    tx
                })
                .collect()
        })
        .collect();
    let parts = per_worker
        .into_iter()
        .enumerate()
        .filter(|(_, controls)| !controls.is_empty())
        .map(|(w, controls)| {
            let link = PartLink {
                controls,
                events: event_tx.clone(),
                metrics: metrics.clone(),
                checkpoint_requests: checkpoint_requests.clone(),
            };
            cluster.run_part(w, spec.clone(), link)
        })
        .collect();
    (parts, controls)
}
