//! Sources: the heads of the graph.
//!
//! A source is polled by its task; between polls the task handles checkpoint triggers, so
//! a checkpoint snapshot always sees the position after the last emitted batch.
//! `poll_next` must be *cancel-safe*: it may be dropped at an `.await` when a checkpoint
//! trigger arrives, so it must change its position only when it returns a batch.

use crate::checkpoint::OperatorState;
use crate::operator::TaskInfo;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use weir_common::{CheckpointId, Result};

/// The name of a source split (a Kafka partition is `topic/partition`), for watermarks
/// kept per split.
pub type SplitId = std::sync::Arc<str>;

/// What a poll returned.
#[derive(Debug)]
pub enum SourcePoll {
    Batch(RecordBatch),
    /// Batches of named splits, in order, for watermarks per split (as Flink's
    /// per-partition watermarks): `added` splits are read by this subtask from now on (a
    /// split holds the watermark back until it has data or is idle for
    /// `table.exec.source.idle-timeout`), `finished` ones ended and hold nothing back.
    Splits {
        added: Vec<SplitId>,
        batches: Vec<(SplitId, RecordBatch)>,
        finished: Vec<SplitId>,
    },
    /// Nothing now; poll again after this long (rate limits, unbounded sources).
    Idle(Duration),
    /// Bounded input exhausted for this subtask.
    Finished,
}

/// A running source subtask.
#[async_trait]
pub trait Source: Send {
    async fn open(&mut self) -> Result<()> {
        Ok(())
    }
    /// Next batch. Must be cancel-safe (see module docs).
    async fn poll_next(&mut self) -> Result<SourcePoll>;
    /// This subtask's position: one item per split, redistributed on restore.
    fn snapshot_state(&mut self, checkpoint: CheckpointId) -> Result<OperatorState>;
    async fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        let _ = checkpoint;
        Ok(())
    }
    async fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Creates the source of each subtask.
pub trait SourceFactory: Send + Sync {
    fn name(&self) -> String;
    fn schema(&self) -> SchemaRef;
    fn is_bounded(&self) -> bool;
    /// `restored` is `None` on a fresh start (the factory splits the input itself) and
    /// `Some` after a restore (the splits this subtask now owns, maybe none).
    fn create(&self, task: &TaskInfo, restored: Option<OperatorState>) -> Result<Box<dyn Source>>;
    /// A factory whose sources may leave out rows whose integer column `column` holds none
    /// of `values`: a batch scan's `column = v` or `column IN (…)` pushed into the source
    /// (the rows are filtered again after the scan, so leaving out some is enough).
    /// `None`: this connector reads every row anyway.
    fn restricted(&self, column: &str, values: &[i64]) -> Option<Arc<dyn SourceFactory>> {
        let _ = (column, values);
        None
    }
    /// A factory whose sources may leave the physical columns whose positions are not in
    /// `used` NULL, because nothing reads them (a batch scan's projection: datagen then
    /// generates only the columns asked for). `None`: this connector makes every column.
    fn projected(&self, used: &[usize]) -> Option<Arc<dyn SourceFactory>> {
        let _ = used;
        None
    }
    /// How many rows a bounded source reads in all, when the connector knows it without
    /// reading (batch mode's join planning puts the smaller input on the build side).
    fn estimated_rows(&self) -> Option<u64> {
        None
    }
}
