//! What a checkpoint holds.
//!
//! A checkpoint is `chk-<N>/` with one state file per task plus `_metadata`, which is
//! written last (atomically): a folder without `_metadata` is not a checkpoint. The
//! metadata records, per vertex, the status of every subtask, following FLIP-147:
//!
//! * `Running`: the subtask's state file;
//! * `FinishedData`: the subtask had reached end of data when it snapshotted; its state
//!   (for example a sink's committables awaiting commit) is still stored;
//! * `Closed`: the subtask had finished and closed before this checkpoint; a marker, no
//!   state.
//!
//! A vertex whose subtasks are all `FinishedData` or `Closed` is *fully finished*: a
//! restore does not run it again (its state is only handed to `open`, so that committers
//! can re-commit).

use serde::{Deserialize, Serialize};
use weir_common::CheckpointId;

/// How an operator's list state is split among the subtasks of a restored job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum StateDistribution {
    /// Item `k` of the union goes to subtask `k % parallelism` (splits, offsets).
    #[default]
    RoundRobin,
    /// Every item goes to subtask 0 (committables: one committer recovers them all).
    ToFirst,
    /// Every subtask gets every item (Flink's union list state).
    Union,
    /// Keyed state: every item is a JSON object with a `kg` (key group) field and goes to
    /// the subtask that owns that key group at the new parallelism.
    KeyGroups,
}

/// State of one operator in one subtask: a list of JSON items, and binary payloads (keyed
/// state as Arrow IPC) that items refer to as `"payload": <index>`. Payloads are stored
/// raw after the JSON in the task's state file, never inside it, and move with their items
/// when state is redistributed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperatorState {
    pub distribution: StateDistribution,
    pub items: Vec<serde_json::Value>,
    #[serde(skip)]
    pub payloads: Vec<bytes::Bytes>,
}

impl OperatorState {
    pub fn new(distribution: StateDistribution, items: Vec<serde_json::Value>) -> Self {
        Self {
            distribution,
            items,
            payloads: Vec::new(),
        }
    }

    /// Keeps `bytes` and returns the reference an item stores under `"payload"`.
    pub fn add_payload(&mut self, bytes: bytes::Bytes) -> serde_json::Value {
        self.payloads.push(bytes);
        serde_json::json!(self.payloads.len() - 1)
    }

    /// The payload an item refers to.
    pub fn payload(&self, item: &serde_json::Value) -> weir_common::Result<&bytes::Bytes> {
        item.get("payload")
            .and_then(|p| p.as_u64())
            .and_then(|p| self.payloads.get(p as usize))
            .ok_or_else(|| {
                weir_common::Error::Checkpoint(format!(
                    "corrupt operator state: item {item} refers to no stored payload"
                ))
            })
    }

    /// Adds an item taken from `from`, with the payload it refers to (if any).
    pub fn push_from(&mut self, from: &OperatorState, item: &serde_json::Value) {
        let mut item = item.clone();
        if let Ok(p) = from.payload(&item) {
            item["payload"] = self.add_payload(p.clone());
        }
        self.items.push(item);
    }
}

/// The state file of one task: its source (if any) and each chained operator in order.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TaskSnapshot {
    pub source: Option<OperatorState>,
    pub operators: Vec<OperatorState>,
}

/// Status of a subtask at a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SubtaskStatus {
    Running,
    FinishedData,
    Closed,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubtaskEntry {
    pub subtask: usize,
    pub status: SubtaskStatus,
    /// Path of the state file, relative to the checkpoint folder.
    pub state_file: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VertexEntry {
    pub uid: String,
    pub name: String,
    pub parallelism: usize,
    pub subtasks: Vec<SubtaskEntry>,
}

impl VertexEntry {
    /// All subtasks have reached end of data (FLIP-147 "fully finished").
    pub fn fully_finished(&self) -> bool {
        !self.subtasks.is_empty()
            && self
                .subtasks
                .iter()
                .all(|s| s.status != SubtaskStatus::Running)
    }
}

/// Version of the checkpoint format this Weir writes and reads: 2 stores keyed state as
/// raw Arrow IPC payloads after each task file's JSON header.
pub const FORMAT_VERSION: u32 = 2;

/// The `_metadata` file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    pub format_version: u32,
    pub job_id: String,
    pub checkpoint_id: CheckpointId,
    pub savepoint: bool,
    pub completed_at_ms: u64,
    pub max_parallelism: usize,
    pub vertices: Vec<VertexEntry>,
}

impl CheckpointMetadata {
    pub fn vertex(&self, uid: &str) -> Option<&VertexEntry> {
        self.vertices.iter().find(|v| v.uid == uid)
    }
}
