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

/// Makes the committables of all subtasks of a sink visible at once, in one place: a
/// table commit per checkpoint (Flink's global committer). The writers are those of a
/// [`GlobalCommitSink`].
#[async_trait]
pub trait GlobalCommitter: Send + Sync {
    fn name(&self) -> String;
    /// Makes visible, in one transaction, the committables of `checkpoints` (ascending,
    /// all completed). Idempotent: checkpoints the target already holds for `run` are
    /// skipped (a re-commit after a restore). `run` names the committer's run: chosen
    /// when the job starts from scratch, kept by every restore from its checkpoints (whose
    /// ids then keep growing), so that a later start from scratch, whose checkpoint ids
    /// begin again at 1, is never taken for a re-commit.
    async fn commit(
        &self,
        run: &str,
        checkpoints: &[(CheckpointId, Vec<Committable>)],
    ) -> Result<()>;
    /// As [`Committer::abort_stale`]; `task` is the committer's own subtask.
    async fn abort_stale(&self, task: &TaskInfo, recovered: &[Committable]) -> Result<()>;
}

/// A two-phase-commit sink whose writers send their committables to one
/// [`GlobalCommitter`] rather than committing them where they are.
#[async_trait]
pub trait GlobalCommitSink: Send + Sync {
    fn name(&self) -> String;
    fn create_writer(&self, task: &TaskInfo) -> Result<Box<dyn SinkWriter>>;
    fn committer(&self) -> Arc<dyn GlobalCommitter>;
    /// As [`TwoPhaseCommitSink::earlier_output`].
    async fn earlier_output(&self, task: &TaskInfo) -> Result<Option<String>> {
        let _ = task;
        Ok(None)
    }
}

/// The one column of the batches a writer sends its committer.
fn committables_schema() -> arrow::datatypes::SchemaRef {
    static SCHEMA: std::sync::OnceLock<arrow::datatypes::SchemaRef> = std::sync::OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            Arc::new(arrow::datatypes::Schema::new(vec![
                arrow::datatypes::Field::new(
                    "committable",
                    arrow::datatypes::DataType::Utf8,
                    false,
                ),
            ]))
        })
        .clone()
}

/// A writer of a [`GlobalCommitSink`]: pre-commits its parts before every barrier (and
/// when its input ends) and sends the committables downstream, ahead of the barrier, so
/// that the committer holds them in the same checkpoint. It keeps no state of its own.
struct CommittableWriterOperator {
    writer: Box<dyn SinkWriter>,
}

impl CommittableWriterOperator {
    async fn send_committables(&mut self, out: &mut Output) -> Result<()> {
        let committables = self.writer.prepare_commit().await?;
        if committables.is_empty() {
            return Ok(());
        }
        let texts = committables
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()?;
        let column = arrow::array::StringArray::from(texts);
        out.emit(RecordBatch::try_new(
            committables_schema(),
            vec![Arc::new(column)],
        )?);
        Ok(())
    }
}

#[async_trait]
impl Operator for CommittableWriterOperator {
    async fn process_batch(&mut self, _: usize, batch: RecordBatch, _: &mut Output) -> Result<()> {
        self.writer.write(batch).await
    }

    async fn prepare_snapshot_pre_barrier(
        &mut self,
        _: CheckpointId,
        out: &mut Output,
    ) -> Result<()> {
        self.send_committables(out).await
    }

    async fn finish(&mut self, out: &mut Output) -> Result<()> {
        // The last parts go before EndOfData; the committer commits them with the final
        // checkpoint (FLIP-147).
        self.send_committables(out).await
    }

    async fn close(&mut self) -> Result<()> {
        self.writer.close().await
    }
}

/// The committer of a [`GlobalCommitSink`] (parallelism 1). Committables received
/// before the barrier of checkpoint `N` belong to `N`; they are kept in its state until
/// a completed checkpoint commits them, all pending checkpoints in one transaction.
struct GlobalCommitterOperator {
    task: TaskInfo,
    committer: Arc<dyn GlobalCommitter>,
    /// See [`GlobalCommitter::commit`]; kept in the state.
    run: String,
    received: Vec<Committable>,
    pending: Vec<(CheckpointId, Vec<Committable>)>,
}

#[async_trait]
impl Operator for GlobalCommitterOperator {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        let mut recovered: Vec<(CheckpointId, Vec<Committable>)> = Vec::new();
        // A start from scratch is a new run; a restore continues the restored one. Two
        // sinks of one job have runs of their own (they may write into one table).
        self.run = format!(
            "{}-{}-{:08x}",
            self.task.lineage,
            &self.task.attempt.simple().to_string()[..16],
            weir_common::fnv32(&self.task.vertex_uid)
        );
        for item in restored.map(|s| s.items).unwrap_or_default() {
            if let Some(run) = item.get("run").and_then(Value::as_str) {
                self.run = run.to_string();
                continue;
            }
            let id = item
                .get("checkpoint")
                .and_then(Value::as_u64)
                .map(CheckpointId)
                .ok_or_else(|| {
                    weir_common::Error::Checkpoint(format!(
                        "committer state without a checkpoint: {item}"
                    ))
                })?;
            let committable = item.get("committable").cloned().unwrap_or(Value::Null);
            match recovered.last_mut() {
                Some((last, list)) if *last == id => list.push(committable),
                _ => recovered.push((id, vec![committable])),
            }
        }
        recovered.sort_by_key(|(id, _)| *id);
        if !recovered.is_empty() {
            self.task.fence.check()?;
            self.committer.commit(&self.run, &recovered).await?;
        }
        let all: Vec<Committable> = recovered.into_iter().flat_map(|(_, c)| c).collect();
        self.committer.abort_stale(&self.task, &all).await
    }

    async fn process_batch(&mut self, _: usize, batch: RecordBatch, _: &mut Output) -> Result<()> {
        let column = batch
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .ok_or_else(|| weir_common::Error::internal("committables are not text"))?;
        for text in column.iter().flatten() {
            self.received.push(serde_json::from_str(text)?);
        }
        Ok(())
    }

    fn snapshot_state(&mut self, id: CheckpointId) -> Result<OperatorState> {
        if !self.received.is_empty() {
            self.pending.push((id, std::mem::take(&mut self.received)));
        }
        let run = serde_json::json!({ "run": self.run });
        let items = std::iter::once(run)
            .chain(self.pending.iter().flat_map(|(id, cs)| {
                cs.iter()
                    .map(|c| serde_json::json!({ "checkpoint": id.0, "committable": c }))
            }))
            .collect();
        Ok(OperatorState::new(StateDistribution::ToFirst, items))
    }

    async fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<()> {
        let ready = self
            .pending
            .iter()
            .take_while(|(cid, _)| *cid <= id)
            .count();
        if ready == 0 {
            return Ok(());
        }
        self.task.fence.check()?;
        self.committer
            .commit(&self.run, &self.pending[..ready])
            .await?;
        self.pending.drain(..ready);
        Ok(())
    }
}

/// Operator factory for the writers of any [`GlobalCommitSink`]; its
/// [`OperatorFactory::global_committer`] is the committer's.
pub struct GlobalCommitSinkFactory(pub Arc<dyn GlobalCommitSink>);

#[async_trait]
impl OperatorFactory for GlobalCommitSinkFactory {
    fn name(&self) -> String {
        self.0.name()
    }
    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(CommittableWriterOperator {
            writer: self.0.create_writer(task)?,
        }))
    }
    fn is_sink(&self) -> bool {
        true
    }
    fn global_committer(&self) -> Option<Arc<dyn OperatorFactory>> {
        Some(Arc::new(GlobalCommitterFactory(self.0.committer())))
    }
    async fn earlier_output(&self, task: &TaskInfo) -> Result<Option<String>> {
        self.0.earlier_output(task).await
    }
}

struct GlobalCommitterFactory(Arc<dyn GlobalCommitter>);

impl OperatorFactory for GlobalCommitterFactory {
    fn name(&self) -> String {
        self.0.name()
    }
    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(GlobalCommitterOperator {
            task: task.clone(),
            committer: self.0.clone(),
            run: String::new(),
            received: Vec::new(),
            pending: Vec::new(),
        }))
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
