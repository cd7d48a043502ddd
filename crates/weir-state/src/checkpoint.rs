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
    /// Payloads the operator keeps on local disk (state larger than memory): where
    /// `on_disk[i]` is set, `payloads[i]` is empty and the writer reads the bytes only if
    /// it has to write them (see [`DiskPayload`]).
    #[serde(skip)]
    pub on_disk: Vec<Option<DiskPayload>>,
}

/// Keyed payloads at least this large go to the job's shared folder when checkpoints are
/// incremental; smaller ones stay inline in the task's state file (an object per tiny key
/// group costs more than writing it again).
pub const SHARED_MIN_BYTES: usize = 4096;

/// The name of `bytes` as a shared object of incremental checkpoints: their XXH3-128, hex.
pub fn shared_name(bytes: &[u8]) -> String {
    shared_name_of(twox_hash::XxHash3_128::oneshot(bytes))
}

/// The [`shared_name`] of bytes whose XXH3-128 is `hash` (hashed as they streamed by).
pub fn shared_name_of(hash: u128) -> String {
    format!("{hash:032x}")
}

/// A payload kept on local disk, with its size and its [`shared_name`]: an incremental
/// checkpoint that already holds an object of that name refers to it without reading
/// the bytes.
#[derive(Clone)]
pub struct DiskPayload {
    pub name: String,
    pub size: u64,
    read: std::sync::Arc<dyn Fn() -> weir_common::Result<bytes::Bytes> + Send + Sync>,
}

impl DiskPayload {
    pub fn new(
        name: String,
        size: u64,
        read: std::sync::Arc<dyn Fn() -> weir_common::Result<bytes::Bytes> + Send + Sync>,
    ) -> Self {
        Self { name, size, read }
    }

    /// A payload kept in memory but handled like one on disk: named (so the checkpoint
    /// writer does not hash it again), and, once a completed checkpoint wrote it, turned
    /// into a reference by [`DiskPayload::shared_only`], which frees the bytes.
    pub fn in_memory(bytes: bytes::Bytes) -> Self {
        let name = shared_name(&bytes);
        let size = bytes.len() as u64;
        Self::new(name, size, std::sync::Arc::new(move || Ok(bytes.clone())))
    }

    /// The bytes, read from disk.
    pub fn read(&self) -> weir_common::Result<bytes::Bytes> {
        (self.read)()
    }

    /// The same payload once its bytes are only in the job's shared folder (a completed
    /// incremental checkpoint wrote them): an incremental checkpoint refers to it by name,
    /// and reading it is an error.
    pub fn shared_only(&self) -> Self {
        Self::in_shared_folder(self.name.clone(), self.size)
    }

    /// A payload of `size` bytes that is only in the job's shared folder, as object
    /// `name` (see [`DiskPayload::shared_only`]).
    pub fn in_shared_folder(name: String, size: u64) -> Self {
        let shown = name.clone();
        Self {
            name,
            size,
            read: std::sync::Arc::new(move || {
                Err(weir_common::Error::Checkpoint(format!(
                    "state payload '{shown}' is only in the shared folder of an earlier \
                     checkpoint, which this checkpoint cannot refer to"
                )))
            }),
        }
    }
}

impl std::fmt::Debug for DiskPayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DiskPayload({}, {} bytes)", self.name, self.size)
    }
}

impl PartialEq for DiskPayload {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.size == other.size
    }
}

impl OperatorState {
    pub fn new(distribution: StateDistribution, items: Vec<serde_json::Value>) -> Self {
        Self {
            distribution,
            items,
            payloads: Vec::new(),
            on_disk: Vec::new(),
        }
    }

    /// Refers to a payload kept on disk (see [`DiskPayload`]) and returns the reference an
    /// item stores under `"payload"`.
    pub fn add_disk_payload(&mut self, payload: DiskPayload) -> serde_json::Value {
        self.on_disk.resize(self.payloads.len(), None);
        self.on_disk.push(Some(payload));
        self.add_payload(bytes::Bytes::new())
    }

    /// Makes payload `p` one kept on disk (a restore that put it there).
    pub fn set_disk_payload(&mut self, p: usize, payload: DiskPayload) {
        self.on_disk.resize(self.payloads.len(), None);
        self.payloads[p] = bytes::Bytes::new();
        self.on_disk[p] = Some(payload);
    }

    /// The payload an item refers to, if it is kept on disk.
    pub fn item_disk_payload(&self, item: &serde_json::Value) -> Option<&DiskPayload> {
        self.payload_index(item)
            .ok()
            .and_then(|p| self.disk_payload(p))
    }

    /// The payload `p` kept on disk, if it is.
    pub fn disk_payload(&self, p: usize) -> Option<&DiskPayload> {
        self.on_disk.get(p).and_then(Option::as_ref)
    }

    /// The size of payload `p`, on disk or in memory.
    pub fn payload_len(&self, p: usize) -> u64 {
        self.disk_payload(p)
            .map_or(self.payloads[p].len() as u64, |d| d.size)
    }

    /// Keeps `bytes` and returns the reference an item stores under `"payload"`.
    pub fn add_payload(&mut self, bytes: bytes::Bytes) -> serde_json::Value {
        self.payloads.push(bytes);
        serde_json::json!(self.payloads.len() - 1)
    }

    /// The index of the payload an item refers to.
    fn payload_index(&self, item: &serde_json::Value) -> weir_common::Result<usize> {
        item.get("payload")
            .and_then(|p| p.as_u64())
            .map(|p| p as usize)
            .filter(|p| *p < self.payloads.len())
            .ok_or_else(|| {
                weir_common::Error::Checkpoint(format!(
                    "corrupt operator state: item {item} refers to no stored payload"
                ))
            })
    }

    /// The payload an item refers to, read from disk if it is kept there.
    pub fn payload(&self, item: &serde_json::Value) -> weir_common::Result<bytes::Bytes> {
        let p = self.payload_index(item)?;
        match self.disk_payload(p) {
            Some(on_disk) => on_disk.read(),
            None => Ok(self.payloads[p].clone()),
        }
    }

    /// Adds an item taken from `from`, with the payload it refers to (if any), which
    /// stays on disk if it is there.
    pub fn push_from(&mut self, from: &OperatorState, item: &serde_json::Value) {
        let mut item = item.clone();
        if let Ok(p) = from.payload_index(&item) {
            item["payload"] = match from.disk_payload(p) {
                Some(on_disk) => self.add_disk_payload(on_disk.clone()),
                None => self.add_payload(from.payloads[p].clone()),
            };
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

impl TaskSnapshot {
    /// State `s`: the source first, if there is one, then the operators in order.
    pub fn state_mut(&mut self, s: usize) -> &mut OperatorState {
        match &mut self.source {
            Some(source) if s == 0 => source,
            Some(_) => &mut self.operators[s - 1],
            None => &mut self.operators[s],
        }
    }
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
    /// Size and checksum of the state file: a file that does not match is corrupt and
    /// the checkpoint is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_digest: Option<FileDigest>,
    /// Shared state objects (incremental checkpoints) the state file refers to: names in
    /// the job's `shared` folder.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared: Vec<String>,
}

/// Size and XXH64 checksum (seed 0, hex) of a stored file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDigest {
    pub size: u64,
    pub xxh64: String,
}

impl FileDigest {
    /// The digest of the concatenation of `chunks`.
    pub fn of<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let mut digester = Digester::default();
        chunks.into_iter().for_each(|c| digester.write(c));
        digester.finish()
    }
}

/// A [`FileDigest`] computed over bytes as they stream by.
pub struct Digester {
    hasher: twox_hash::XxHash64,
    size: u64,
}

impl Default for Digester {
    fn default() -> Self {
        Self {
            hasher: twox_hash::XxHash64::with_seed(0),
            size: 0,
        }
    }
}

impl Digester {
    pub fn write(&mut self, chunk: &[u8]) {
        std::hash::Hasher::write(&mut self.hasher, chunk);
        self.size += chunk.len() as u64;
    }

    pub fn finish(&self) -> FileDigest {
        FileDigest {
            size: self.size,
            xxh64: format!("{:016x}", std::hash::Hasher::finish(&self.hasher)),
        }
    }
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
/// raw Arrow IPC payloads after each task file's JSON header; 3 adds checksums (of every
/// state file and of `_metadata` itself) and the job's lineage; 4 puts keyed state in key
/// groups by Weir's own key hash ([`crate::key`], version [`crate::key::KEY_HASH_VERSION`])
/// instead of the standard library's.
pub const FORMAT_VERSION: u32 = 4;

/// The `_metadata` file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    pub format_version: u32,
    pub job_id: String,
    /// Identifies the job across its runs: chosen when a run starts from scratch (from
    /// the checkpoint folder and the job's shape, or the job id without a folder) and
    /// kept by every run restored from its checkpoints or savepoints. Sinks tag what they
    /// write with it, so that a restore only touches its own lineage's files.
    pub lineage: String,
    pub checkpoint_id: CheckpointId,
    pub savepoint: bool,
    pub completed_at_ms: u64,
    pub max_parallelism: usize,
    pub vertices: Vec<VertexEntry>,
    /// XXH64 of this metadata serialized without the checksum (see [`Self::seal`]).
    #[serde(default)]
    pub checksum: Option<String>,
}

impl CheckpointMetadata {
    fn digest(&self) -> weir_common::Result<String> {
        let mut unsealed = self.clone();
        unsealed.checksum = None;
        Ok(FileDigest::of([serde_json::to_vec(&unsealed)?.as_slice()]).xxh64)
    }

    /// Sets the checksum over everything else.
    pub fn seal(&mut self) -> weir_common::Result<()> {
        self.checksum = Some(self.digest()?);
        Ok(())
    }

    /// Checks the checksum set by [`Self::seal`].
    pub fn verify(&self) -> std::result::Result<(), String> {
        let expected = self.digest().map_err(|e| e.to_string())?;
        match &self.checksum {
            Some(c) if *c == expected => Ok(()),
            Some(c) => Err(format!(
                "its checksum does not match its content (stored {c}, computed {expected})"
            )),
            None => Err("it has no checksum".into()),
        }
    }

    pub fn vertex(&self, uid: &str) -> Option<&VertexEntry> {
        self.vertices.iter().find(|v| v.uid == uid)
    }
}
