//! The two-phase-commit sink framework.
//!
//! A sink is a [`SinkWriter`] per subtask plus a shared [`Committer`]. The runtime drives
//! them through [`TwoPhaseCommitSinkOperator`]:
//!
//! 1. `write` for every batch. Data goes to *in-progress* parts nobody else can see.
//! 2. `prepare_commit` before each checkpoint barrier (and so before the final
//!    checkpoint of a bounded job): in-progress parts are closed and turned into
//!    *committables* — durable, still invisible, enough to make the data visible later.
//!    They are stored in the checkpoint.
//! 3. When checkpoint `N` completes, every committable of checkpoints `<= N` is committed
//!    in ascending checkpoint order.
//! 4. After a restore, committables recorded in the restored checkpoint are committed
//!    again (they belong to a completed checkpoint), then [`Committer::abort_stale`]
//!    removes what earlier attempts left open.
//!
//! `commit` must be idempotent: finding the data already visible as expected is success.
//! Errors fail the job; it restarts from its last checkpoint and commits again.

use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use serde_json::Value;
use std::sync::Arc;
use weir_common::{CheckpointId, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, StateDistribution, TaskInfo};

/// Serialized description of pre-committed data (for files: pending path, final path, size).
pub type Committable = Value;

/// Writes one subtask's data into invisible parts.
#[async_trait]
pub trait SinkWriter: Send {
    async fn write(&mut self, batch: RecordBatch) -> Result<()>;
    /// Closes the open parts and returns their committables.
    async fn prepare_commit(&mut self) -> Result<Vec<Committable>>;
    /// Releases resources; uncommitted data is left for `abort_stale`.
    async fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Makes pre-committed data visible.
#[async_trait]
pub trait Committer: Send + Sync {
    /// Makes `committable` visible. Idempotent.
    async fn commit(&self, committable: &Committable) -> Result<()>;
    /// Called once per start (by subtask 0, after re-committing `recovered` on a restore): removes
    /// parts left by earlier attempts *of the same lineage* (`task.lineage`) that no
    /// checkpoint references. Parts of the current attempt (`task.attempt`) and of other
    /// jobs (another lineage, even with the same shape) must be kept.
    async fn abort_stale(&self, task: &TaskInfo, recovered: &[Committable]) -> Result<()>;
}

/// A two-phase-commit sink: creates writers and the committer.
#[async_trait]
pub trait TwoPhaseCommitSink: Send + Sync {
    fn name(&self) -> String;
    fn create_writer(&self, task: &TaskInfo) -> Result<Box<dyn SinkWriter>>;
    fn committer(&self) -> Arc<dyn Committer>;
    /// Committed output of an earlier run of the same job (see
    /// [`OperatorFactory::earlier_output`]).
    async fn earlier_output(&self, task: &TaskInfo) -> Result<Option<String>> {
        let _ = task;
        Ok(None)
    }
}

/// Adapts a [`TwoPhaseCommitSink`] to the operator lifecycle.
pub struct TwoPhaseCommitSinkOperator {
    task: TaskInfo,
    writer: Box<dyn SinkWriter>,
    committer: Arc<dyn Committer>,
    /// Committables not yet committed, by the checkpoint that pre-committed them.
    pending: Vec<(CheckpointId, Vec<Committable>)>,
}

#[async_trait]
impl Operator for TwoPhaseCommitSinkOperator {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        let Some(state) = restored else {
            // A start from scratch: an earlier run of this lineage that crashed before
            // its first checkpoint may have left parts nobody will commit.
            if self.task.subtask == 0 {
                self.committer.abort_stale(&self.task, &[]).await?;
            }
            return Ok(());
        };
        let mut recovered = Vec::new();
        self.task.fence.check()?;
        for item in state.items {
            let committable = item.get("committable").cloned().unwrap_or(item);
            self.committer.commit(&committable).await?;
            recovered.push(committable);
        }
        if self.task.subtask == 0 {
            self.committer.abort_stale(&self.task, &recovered).await?;
        }
        Ok(())
    }

    async fn process_batch(&mut self, _: usize, batch: RecordBatch, _: &mut Output) -> Result<()> {
        self.writer.write(batch).await
    }

    async fn prepare_snapshot_pre_barrier(
        &mut self,
        id: CheckpointId,
        _: &mut Output,
    ) -> Result<()> {
        let committables = self.writer.prepare_commit().await?;
        if !committables.is_empty() {
            self.pending.push((id, committables));
        }
        Ok(())
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        let items = self
            .pending
            .iter()
            .flat_map(|(id, cs)| {
                cs.iter()
                    .map(|c| serde_json::json!({ "checkpoint": id.0, "committable": c }))
            })
            .collect();
        Ok(OperatorState::new(StateDistribution::ToFirst, items))
    }

    async fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<()> {
        // Ascending checkpoint order: `pending` is kept in trigger order.
        while self.pending.first().is_some_and(|(cid, _)| *cid <= id) {
            self.task.fence.check()?;
            let (_, committables) = self.pending.remove(0);
            for c in &committables {
                self.committer.commit(c).await?;
            }
        }
        Ok(())
    }

    async fn close(&mut self) -> Result<()> {
        self.writer.close().await
    }
}

/// Operator factory for any [`TwoPhaseCommitSink`].
pub struct TwoPhaseCommitSinkFactory(pub Arc<dyn TwoPhaseCommitSink>);

#[async_trait]
impl OperatorFactory for TwoPhaseCommitSinkFactory {
    fn name(&self) -> String {
        self.0.name()
    }
    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(TwoPhaseCommitSinkOperator {
            task: task.clone(),
            writer: self.0.create_writer(task)?,
            committer: self.0.committer(),
            pending: Vec::new(),
        }))
    }
    fn is_sink(&self) -> bool {
        true
    }
    async fn earlier_output(&self, task: &TaskInfo) -> Result<Option<String>> {
        self.0.earlier_output(task).await
    }
}
