//! The operator trait and its lifecycle.
//!
//! # Call order
//! For each subtask the runtime calls, on one tokio task and never concurrently:
//!
//! `open` → (`process_batch` | `process_watermark` | `prepare_snapshot_pre_barrier` →
//! `snapshot_state` | `notify_checkpoint_complete` | `notify_checkpoint_aborted`)* →
//! `end_input(i)` for each input → `finish` → (checkpoint events only, until the first
//! checkpoint taken after `finish` completes) → `close`.
//!
//! * `finish` flushes buffered results; no record may be emitted after it returns. It
//!   never commits anything: commits happen in `notify_checkpoint_complete`.
//! * `close` releases resources. It is called on a normal end; on failure the task is
//!   dropped, so `Drop` must be enough to release what `close` would.
//! * `prepare_snapshot_pre_barrier` runs before the barrier is forwarded, so records it
//!   emits belong to the checkpoint (two-phase-commit writers pre-commit here).
//! * A returned error fails the job, which then restarts from its last checkpoint.

use crate::checkpoint::OperatorState;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use std::sync::Arc;
use weir_common::{CheckpointId, JobId, Result};

/// Where a subtask stands in the job.
#[derive(Debug, Clone)]
pub struct TaskInfo {
    pub job_id: JobId,
    /// A fresh id per run of the job (a restore is a new attempt).
    pub attempt: uuid::Uuid,
    /// Identifies the job across runs restored from its checkpoints (see
    /// [`crate::CheckpointMetadata::lineage`]).
    pub lineage: String,
    /// Identifies the job: its vertices' uids and names and [`crate::JobGraph::fingerprint`]
    /// (its statements and tables' definitions). A later run of the same script has the
    /// same fingerprint, whatever its lineage.
    pub job_fingerprint: u64,
    /// Fails once this run has lost its claim on the checkpoint folder: check it before
    /// committing anything.
    pub fence: crate::lease::Fence,
    pub vertex_uid: String,
    pub vertex_name: String,
    pub subtask: usize,
    pub parallelism: usize,
    pub max_parallelism: usize,
    pub metrics: Arc<crate::JobMetrics>,
    /// `table.exec.source.idle-timeout`: a source split (or task) without data this long
    /// stops holding the watermark back.
    pub source_idle_timeout: Option<std::time::Duration>,
    /// Checkpoints are incremental (`execution.checkpointing.incremental`): a keyed
    /// payload of a completed checkpoint stays in the job's shared folder while later
    /// checkpoints refer to it.
    pub incremental_checkpoints: bool,
    /// Wakes the checkpoint coordinator for an early checkpoint (see
    /// [`TaskInfo::request_checkpoint`]).
    pub checkpoint_requests: Arc<tokio::sync::Notify>,
}

impl TaskInfo {
    /// Asks for a checkpoint before the interval is up, e.g. by a sink whose uncommitted
    /// output grows large: the coordinator takes one as soon as none is in flight and
    /// the minimum pause has passed. Nothing happens without periodic checkpoints.
    pub fn request_checkpoint(&self) {
        self.checkpoint_requests.notify_one();
    }
}

/// A record-level item an operator emits.
#[derive(Debug, Clone)]
pub enum StreamItem {
    Batch(RecordBatch),
    Watermark(i64),
}

/// Collects what an operator emits during one call; the runtime passes it on.
#[derive(Debug, Default)]
pub struct Output {
    pub(crate) items: Vec<StreamItem>,
    /// The source split the batches of this call come from, when the source names its
    /// splits ([`crate::SourcePoll::Splits`]) and the call is in its task's chain.
    pub(crate) split: Option<crate::SplitId>,
}

impl Output {
    /// An output for a call on batches of source split `split` (for operator tests).
    pub fn for_split(split: Option<crate::SplitId>) -> Self {
        Self {
            items: Vec::new(),
            split,
        }
    }
    /// The source split the batches of this call come from (see [`Output::for_split`]).
    pub fn split(&self) -> Option<&crate::SplitId> {
        self.split.as_ref()
    }
    /// Emits a batch (empty batches are dropped).
    pub fn emit(&mut self, batch: RecordBatch) {
        if batch.num_rows() > 0 {
            self.items.push(StreamItem::Batch(batch));
        }
    }
    /// Emits a watermark.
    pub fn emit_watermark(&mut self, watermark: i64) {
        self.items.push(StreamItem::Watermark(watermark));
    }
    /// Takes what was emitted (useful for tests of operators).
    pub fn take(&mut self) -> Vec<StreamItem> {
        std::mem::take(&mut self.items)
    }
}

/// A streaming operator. See the module documentation for the call order.
#[async_trait]
pub trait Operator: Send {
    /// Called once before anything else; `restored` is this subtask's share of the
    /// operator's state when the job restores from a checkpoint.
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        let _ = restored;
        Ok(())
    }

    /// Processes one batch from input `input` (0 for single-input operators).
    async fn process_batch(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()>;

    /// Source splits of this task were `added` (each holds the watermark back until it
    /// has data or goes idle) or `finished`, for operators that keep a watermark per split.
    /// Called on each operator of the source's chain in order.
    async fn splits_changed(
        &mut self,
        added: &[crate::SplitId],
        finished: &[crate::SplitId],
        out: &mut Output,
    ) -> Result<()> {
        let _ = (added, finished, out);
        Ok(())
    }

    /// Called when the combined watermark of all inputs advances. The default forwards it.
    async fn process_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        out.emit_watermark(watermark);
        Ok(())
    }

    /// Bytes of state the operator holds in memory (reported at checkpoints; may be an
    /// estimate, and may take time proportional to the state).
    fn state_bytes(&self) -> usize {
        0
    }

    /// The processing time (milliseconds since the epoch) at which the operator wants
    /// [`Operator::on_timer`] called, if any (processing-time windows). Asked after every
    /// call into the operator.
    fn next_timer(&self) -> Option<i64> {
        None
    }

    /// Called once processing time has reached [`Operator::next_timer`].
    async fn on_timer(&mut self, now_ms: i64, out: &mut Output) -> Result<()> {
        let _ = (now_ms, out);
        Ok(())
    }

    /// Before the barrier of `checkpoint` is forwarded.
    async fn prepare_snapshot_pre_barrier(
        &mut self,
        checkpoint: CheckpointId,
        out: &mut Output,
    ) -> Result<()> {
        let _ = (checkpoint, out);
        Ok(())
    }

    /// Returns the state to store in `checkpoint`.
    fn snapshot_state(&mut self, checkpoint: CheckpointId) -> Result<OperatorState> {
        let _ = checkpoint;
        Ok(OperatorState::default())
    }

    /// `checkpoint` completed: every task stored its state. Commit here.
    async fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        let _ = checkpoint;
        Ok(())
    }

    /// `checkpoint` will never complete.
    async fn notify_checkpoint_aborted(&mut self, checkpoint: CheckpointId) -> Result<()> {
        let _ = checkpoint;
        Ok(())
    }

    /// Input `input` has no more data.
    async fn end_input(&mut self, input: usize, out: &mut Output) -> Result<()> {
        let _ = (input, out);
        Ok(())
    }

    /// All inputs ended: flush and emit what is left. Nothing may be emitted later.
    async fn finish(&mut self, out: &mut Output) -> Result<()> {
        let _ = out;
        Ok(())
    }

    /// Releases resources after the final checkpoint.
    async fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

/// The uid of the vertex of a sink's [`OperatorFactory::global_committer`], from the
/// sink's own vertex uid (see [`writers_uid`]).
pub fn committer_uid(sink_uid: &str) -> String {
    format!("{sink_uid}-committer")
}

/// The sink's vertex uid, from its committer's ([`committer_uid`]); any other uid as it is.
pub fn writers_uid(committer_uid: &str) -> &str {
    committer_uid
        .strip_suffix("-committer")
        .unwrap_or(committer_uid)
}

/// Creates the operator instance of each subtask.
#[async_trait]
pub trait OperatorFactory: Send + Sync {
    /// Short name shown by EXPLAIN, e.g. `Calc(filter, project)`.
    fn name(&self) -> String;
    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>>;
    /// True for sinks: the rows they take are the job's output (counted as written). A
    /// sink has no output edges, except to its [`OperatorFactory::global_committer`].
    fn is_sink(&self) -> bool {
        false
    }
    /// For sinks that commit in one place (Flink's global committer): the operator of a
    /// vertex of parallelism 1, fed by every subtask of this sink, that takes what they
    /// emit (their committables) and commits it when checkpoints complete. Its vertex's
    /// uid is [`committer_uid`] of the sink's.
    fn global_committer(&self) -> Option<Arc<dyn OperatorFactory>> {
        None
    }
    /// For sinks, before a job starts from scratch: committed output of an earlier run of
    /// the same job (same [`TaskInfo::job_fingerprint`]) that this sink
    /// can see, described for a message (where, how much, an example).
    async fn earlier_output(&self, task: &TaskInfo) -> Result<Option<String>> {
        let _ = task;
        Ok(None)
    }
}
