//! Delta snapshots of keyed state: a checkpoint writes the keys whose state changed since
//! the previous one, not all of them. Used by the updating group aggregates (keys are the
//! vectorized one's key hashes, the row-at-a-time one's group keys) and Top-N (keys
//! are partitions).
//!
//! Per key group the operator keeps the parts its earlier snapshots wrote: each part is
//! the encoded state rows of some keys, and those keys. A snapshot adds, for each key
//! group with changed keys, a part holding their rows, and hands every part on as an item
//! of its key group. Parts written before are the same bytes again, which incremental
//! checkpoints (`execution.checkpointing.incremental`) store once and then refer to by
//! name. A restore reads a key group's parts in order, and a key's rows in a later part
//! replace its rows in earlier ones; the redistribution of keyed state keeps the order of
//! a key group's items. A part holds every stored row of each of its keys.
//!
//! Parts merge like a binary counter: while a part holds fewer than twice the keys of the
//! part after it, the two become one part of their keys' current rows. So a key group's
//! parts hold at most twice its keys (each part at least twice the next), it has about
//! log2(n) parts, a key is written again about log2(n) times, and keys changing at every
//! snapshot stay in the small last part. Only the last part of a key group is ever
//! encoded again.
//!
//! A part's bytes stay in memory only until a completed checkpoint wrote them to the
//! shared folder (parts of [`SHARED_MIN_BYTES`] or more); later snapshots refer to them
//! there by name, as the join's epochs do. Under a state memory budget they wait in
//! memory, counted in the operator's share, while the budget has room, else in a local
//! file (a merge may encode most of the state again). Without incremental checkpoints
//! every snapshot is whole and nothing is kept. A key that is dropped (state TTL, a
//! Top-N partition emptied, an upsert key deleted) is not in a later part: the operator
//! then starts over, and the next snapshot is whole.

use arrow::array::RecordBatch;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::Arc;
use weir_common::{CheckpointId, Result};
use weir_runtime::{OperatorState, StateDistribution};
use weir_state::checkpoint::{DiskPayload, SHARED_MIN_BYTES, shared_name};
use weir_state::keyed::encode_batch;
use weir_state::spill::{SpillFile, StateMemory};

/// One part: the keys it holds, and their rows as written.
struct Part<K> {
    keys: Vec<K>,
    payload: Payload,
}

enum Payload {
    /// Encoded for checkpoint `since`, not known to be in the shared folder yet.
    Memory { bytes: Bytes, since: u64 },
    /// The same, named, under a memory budget, in memory (counted in the operator's
    /// [`DeltaSnapshots::held`] bytes).
    Held { payload: DiskPayload, since: u64 },
    /// The same, waiting in a local file (under a memory budget).
    Disk { payload: DiskPayload, since: u64 },
    /// Written to the shared folder by a completed checkpoint.
    Shared(DiskPayload),
}

pub(super) struct DeltaSnapshots<K> {
    max_parallelism: usize,
    /// Checkpoints are incremental; without, every snapshot is whole.
    incremental: bool,
    /// By key group.
    parts: Vec<Vec<Part<K>>>,
    /// The next snapshot writes every key anew.
    whole: bool,
    /// The keys the parts list, with their lists' slack (see [`Self::keys_held`]).
    keys_held: usize,
    /// See [`Self::held`].
    held: u64,
    /// The job's state budget: parts wait for their checkpoint in memory while it has
    /// room, else in local files.
    memory: Option<Arc<StateMemory>>,
}

impl<K: Ord + Clone> DeltaSnapshots<K> {
    pub(super) fn new(max_parallelism: usize, incremental: bool) -> Self {
        DeltaSnapshots {
            max_parallelism,
            incremental,
            parts: (0..max_parallelism).map(|_| Vec::new()).collect(),
            whole: true,
            keys_held: 0,
            held: 0,
            memory: None,
        }
    }

    /// Under the job's state budget `memory` (if any), new parts wait for their checkpoint
    /// in memory while it has room (see [`Self::held`]), else on local disk.
    pub(super) fn on_disk(mut self, memory: Option<Arc<StateMemory>>) -> Self {
        self.memory = memory;
        self
    }

    /// Keys were dropped, or mean other state now: the next snapshot writes every key.
    pub(super) fn start_over(&mut self) {
        self.whole = true;
    }

    /// Whether the next snapshot writes every key (the operator hands it all of them).
    pub(super) fn whole(&self) -> bool {
        self.whole || !self.incremental
    }

    /// Checkpoint `checkpoint` completed: the parts it wrote to the shared folder are
    /// referred to there from now on, and their bytes go.
    pub(super) fn completed(&mut self, checkpoint: CheckpointId) {
        if !self.incremental {
            return;
        }
        for part in self.parts.iter_mut().flatten() {
            match &part.payload {
                Payload::Memory { bytes, since }
                    if *since <= checkpoint.0 && bytes.len() >= SHARED_MIN_BYTES =>
                {
                    let shared =
                        DiskPayload::in_shared_folder(shared_name(bytes), bytes.len() as u64);
                    part.payload = Payload::Shared(shared);
                }
                Payload::Disk { payload, since } | Payload::Held { payload, since }
                    if *since <= checkpoint.0 =>
                {
                    part.payload = Payload::Shared(payload.shared_only());
                }
                _ => {}
            }
        }
        self.count_held();
    }

    /// Bytes of parts held in memory under a budget until their checkpoint completes,
    /// which the operator counts against the budget.
    pub(super) fn held(&self) -> u64 {
        self.held
    }

    fn count_held(&mut self) {
        self.held = self
            .parts
            .iter()
            .flatten()
            .map(|p| match &p.payload {
                Payload::Held { payload, .. } => payload.size,
                _ => 0,
            })
            .sum();
    }

    /// The keys the parts list (with their lists' slack): what the parts hold in memory
    /// for good, as their bytes leave once a checkpoint wrote them.
    pub(super) fn keys_held(&self) -> usize {
        self.keys_held
    }

    /// Memory the parts take (their keys counted at `key_bytes` each).
    pub(super) fn size(&self, key_bytes: usize) -> usize {
        self.parts
            .iter()
            .flatten()
            .map(|p| {
                p.keys.capacity() * key_bytes
                    + match &p.payload {
                        Payload::Memory { bytes, .. } => bytes.len(),
                        Payload::Held { payload, .. } => payload.size as usize,
                        Payload::Disk { .. } | Payload::Shared(_) => 0,
                    }
            })
            .sum()
    }

    /// The snapshot for checkpoint `checkpoint`: the parts written before, and new ones of
    /// the `changed` keys (every key when [`Self::whole`]), split by key group (of each
    /// key's hash, [`weir_state::key`], which `hashes_of` gives) and encoded from `rows_of`
    /// (every state row of the keys).
    pub(super) fn snapshot(
        &mut self,
        checkpoint: CheckpointId,
        changed: Vec<K>,
        hashes_of: impl Fn(&[K]) -> Result<Vec<u64>>,
        mut rows_of: impl FnMut(&[K]) -> Result<RecordBatch>,
    ) -> Result<OperatorState> {
        if self.whole() {
            self.parts.iter_mut().for_each(Vec::clear);
            self.whole = false;
        }
        // Where this snapshot's parts wait on disk, if they do, and the bytes of those
        // it keeps in memory (which the budget does not count yet).
        let mut file: Option<Arc<SpillFile>> = None;
        let mut pending = 0;
        if !changed.is_empty() {
            let mut by_group: BTreeMap<usize, Vec<K>> = BTreeMap::new();
            for (key, hash) in changed.iter().zip(hashes_of(&changed)?) {
                let kg = weir_state::key::key_group(hash, self.max_parallelism);
                by_group.entry(kg).or_default().push(key.clone());
            }
            for (kg, mut last) in by_group {
                let parts = &mut self.parts[kg];
                while parts.last().is_some_and(|p| p.keys.len() < 2 * last.len()) {
                    last.extend(parts.pop().expect("a last part").keys);
                }
                last.sort_unstable();
                last.dedup();
                let bytes = encode_batch(&rows_of(&last)?)?;
                let since = checkpoint.0;
                let payload = match &self.memory {
                    // In memory, counted against the budget, while it has room and a
                    // completed checkpoint frees the bytes (writing every part to a
                    // local file first wrote it twice).
                    Some(memory)
                        if bytes.len() >= SHARED_MIN_BYTES
                            && self.incremental
                            && memory.has_room(pending + bytes.len() as u64) =>
                    {
                        pending += bytes.len() as u64;
                        let payload = DiskPayload::in_memory(bytes);
                        Payload::Held { payload, since }
                    }
                    Some(memory) if bytes.len() >= SHARED_MIN_BYTES => {
                        let file = SpillFile::in_slot(&mut file, memory)?;
                        let (_, payload) = file.keep(vec![(kg, bytes)])?.remove(0);
                        Payload::Disk { payload, since }
                    }
                    _ => Payload::Memory { bytes, since },
                };
                parts.push(Part {
                    keys: last,
                    payload,
                });
            }
        }
        let mut state = OperatorState::new(StateDistribution::KeyGroups, Vec::new());
        for (kg, parts) in self.parts.iter().enumerate() {
            for part in parts {
                let payload = match &part.payload {
                    Payload::Memory { bytes, .. } => state.add_payload(bytes.clone()),
                    Payload::Disk { payload, .. }
                    | Payload::Held { payload, .. }
                    | Payload::Shared(payload) => state.add_disk_payload(payload.clone()),
                };
                state
                    .items
                    .push(serde_json::json!({ "kg": kg, "payload": payload }));
            }
        }
        if !self.incremental {
            // Each snapshot is whole: nothing is kept for the next.
            self.parts.iter_mut().for_each(Vec::clear);
        }
        // Only snapshots change the parts' keys; operators ask after every batch.
        self.keys_held = self.parts.iter().flatten().map(|p| p.keys.capacity()).sum();
        self.count_held();
        Ok(state)
    }
}

/// Delta snapshots of an operator that names its keys by their key hash
/// ([`weir_state::key`], which also decides their key group), with the hashes changed
/// since the previous snapshot.
pub(super) struct HashDeltas {
    delta: DeltaSnapshots<u64>,
    changed: std::collections::HashSet<u64>,
}

/// Memory of a key hash in a part's list, and in the changed set (with its slack).
const HASH_BYTES: usize = 8;
const CHANGED_BYTES: usize = 16;

impl Default for HashDeltas {
    fn default() -> Self {
        Self::new(DeltaSnapshots::new(0, false))
    }
}

impl HashDeltas {
    pub(super) fn new(delta: DeltaSnapshots<u64>) -> Self {
        HashDeltas {
            delta,
            changed: Default::default(),
        }
    }

    /// The state of the key of hash `hash` changed.
    pub(super) fn mark(&mut self, hash: u64) {
        self.changed.insert(hash);
    }

    /// Keys were dropped: the next snapshot writes every key.
    pub(super) fn start_over(&mut self) {
        self.changed.clear();
        self.delta.start_over();
    }

    /// What this holds in memory for good (about): the key hashes of the parts and of the
    /// changed keys, and the parts waiting for their checkpoint in memory, to be counted
    /// in the state budget.
    pub(super) fn bookkeeping(&self) -> u64 {
        (self.delta.keys_held() * HASH_BYTES + self.changed.capacity() * CHANGED_BYTES) as u64
            + self.delta.held()
    }

    /// What this holds in memory now, parts' bytes included.
    pub(super) fn size(&self) -> usize {
        self.delta.size(HASH_BYTES) + self.changed.capacity() * CHANGED_BYTES
    }

    pub(super) fn completed(&mut self, checkpoint: CheckpointId) {
        self.delta.completed(checkpoint);
    }

    /// The snapshot for `checkpoint` ([`DeltaSnapshots::snapshot`]): `every` gives the
    /// hashes of all keys for a whole one, `rows_of` every state row of the keys of some
    /// hashes.
    pub(super) fn snapshot(
        &mut self,
        checkpoint: CheckpointId,
        every: impl FnOnce() -> Vec<u64>,
        rows_of: impl FnMut(&[u64]) -> Result<RecordBatch>,
    ) -> Result<OperatorState> {
        let changed = match self.delta.whole() {
            true => {
                self.changed.clear();
                every()
            }
            false => self.changed.drain().collect(),
        };
        let hashes_of = |hashes: &[u64]| Ok(hashes.to_vec());
        self.delta.snapshot(checkpoint, changed, hashes_of, rows_of)
    }
}

/// The key hashes ([`weir_state::key`]) of keys held as rows of `converter`, whose first
/// `hashed` columns are the key columns (none: one key for every row).
pub(super) fn row_key_hashes(
    converter: &arrow::row::RowConverter,
    keys: &[arrow::row::OwnedRow],
    hashed: usize,
) -> Result<Vec<u64>> {
    let columns = converter.convert_rows(keys.iter().map(|k| k.row()))?;
    let columns: Vec<&dyn arrow::array::Array> =
        columns[..hashed].iter().map(|c| c.as_ref()).collect();
    weir_state::key::hash_arrays(&columns, keys.len())
}

/// Every key of an operator whose keys are rows of `converter`: those in memory
/// (`in_memory`), then those on disk, for a whole snapshot.
pub(super) fn every_key<'a>(
    in_memory: impl Iterator<Item = &'a arrow::row::OwnedRow>,
    on_disk: &weir_state::cold::ColdEntries,
    converter: &arrow::row::RowConverter,
) -> Result<Vec<arrow::row::OwnedRow>> {
    let mut keys: Vec<arrow::row::OwnedRow> = in_memory.cloned().collect();
    let parser = converter.parser();
    on_disk.for_each(|key, _| {
        keys.push(parser.parse(key).owned());
        Ok(())
    })?;
    Ok(keys)
}

/// Group ids changed since the previous snapshot: each once, in order of first change.
#[derive(Default)]
pub(super) struct ChangedIds {
    ids: Vec<u32>,
    flags: Vec<bool>,
}

impl ChangedIds {
    pub(super) fn mark(&mut self, ids: &[u32]) {
        for &g in ids {
            let at = g as usize;
            if at >= self.flags.len() {
                self.flags.resize(at + 1, false);
            }
            if !self.flags[at] {
                self.flags[at] = true;
                self.ids.push(g);
            }
        }
    }

    /// The ids marked since the last call, which are forgotten.
    pub(super) fn take(&mut self) -> Vec<u32> {
        for g in &self.ids {
            self.flags[*g as usize] = false;
        }
        std::mem::take(&mut self.ids)
    }

    pub(super) fn clear(&mut self) {
        self.ids.clear();
        self.flags.clear();
    }
}
