//! The messages of a data channel. One ordered stream per channel carries data and every
//! data-plane event; there are no side channels for data-plane events.

use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};
use weir_common::CheckpointId;

/// Why a task stops producing data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopMode {
    /// Input is exhausted (or stop-with-savepoint --drain): operators call `end_input`
    /// and `finish`, and the job commits everything.
    Drain,
    /// Stop-with-savepoint without drain: no `end_input`/`finish`; state stays in the
    /// savepoint and the job resumes from it later.
    NoDrain,
}

/// Checkpoint or savepoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CheckpointKind {
    Checkpoint,
    Savepoint,
}

/// A checkpoint barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Barrier {
    pub id: CheckpointId,
    pub kind: CheckpointKind,
}

/// Whether an upstream subtask currently produces data (Flink's `WatermarkStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WatermarkStatus {
    /// No data for `table.exec.source.idle-timeout`: the channel's watermark does not hold
    /// back the combined watermark downstream.
    Idle,
    /// Producing again (sent before the first batch after `Idle`).
    Active,
}

/// What flows through a channel, in order.
#[derive(Debug, Clone)]
pub enum Message {
    Data(RecordBatch),
    /// Event time in milliseconds since the epoch: no later record is older than this.
    Watermark(i64),
    WatermarkStatus(WatermarkStatus),
    Barrier(Barrier),
    /// The upstream subtask will send no more data (it may still send barriers).
    EndOfData(StopMode),
    /// The upstream subtask has closed; nothing follows.
    EndOfPartition,
}
