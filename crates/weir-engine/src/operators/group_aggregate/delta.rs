//! Delta snapshots of the vectorized group aggregate: a checkpoint writes the groups that
//! changed since the previous one, not all of them.
//!
//! Per key group the aggregate keeps the parts its earlier snapshots wrote: each part is
//! the encoded rows of some groups, and the ids of those groups. A snapshot adds, for each
//! key group with changed groups, a part holding their rows, and hands every part on as
//! an item of its key group. Parts written before are the same bytes again, which
//! incremental checkpoints (`execution.checkpointing.incremental`) store once and then
//! refer to by name. A restore reads a key group's parts in order, and a later row of a
//! group replaces an earlier one (the redistribution of keyed state keeps the order of a
//! key group's items).
//!
//! Parts merge like a binary counter: while a part holds fewer than twice the rows of
//! the part after it, the two become one part of their groups' current rows. A key group
//! so has about log2(n) parts, and a row is written again about log2(n) times. Hot groups
//! changing at every snapshot stay in the small last part. A key group whose parts would
//! hold more than twice its groups (plus some slack) is written again whole, as one part,
//! so a restore reads at most about twice the state. Only the last part of a key group
//! is ever encoded again. After groups are dropped (the state TTL), or from a restore on,
//! the next snapshot starts again from whole key groups.
//!
//! A part's bytes stay in memory only until a completed checkpoint wrote them to the
//! shared folder (parts of [`SHARED_MIN_BYTES`] or more); later snapshots refer to them
//! there by name, as the join's epochs do. Without incremental checkpoints every snapshot
//! is whole and nothing is kept.

use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use bytes::Bytes;
use std::collections::BTreeMap;
use weir_common::{CheckpointId, Result};
use weir_runtime::{OperatorState, StateDistribution};
use weir_state::checkpoint::{DiskPayload, SHARED_MIN_BYTES, shared_name};
use weir_state::key::{hash_arrays, key_group};
use weir_state::keyed::encode_batch;

/// Rows a key group's parts may hold beyond twice its groups before it is written whole.
const SLACK_ROWS: usize = 1024;

/// One part: the groups it holds, and their rows as written.
struct Part {
    ids: Vec<u32>,
    payload: Payload,
}

enum Payload {
    /// Encoded for checkpoint `since`, not known to be in the shared folder yet.
    Memory { bytes: Bytes, since: u64 },
    /// Written to the shared folder by a completed checkpoint.
    Shared(DiskPayload),
}

/// The parts written for one key group.
#[derive(Default)]
struct KeyGroupParts {
    parts: Vec<Part>,
    /// Groups of the key group.
    groups: usize,
}

impl KeyGroupParts {
    fn rows(&self) -> usize {
        self.parts.iter().map(|p| p.ids.len()).sum()
    }
}

pub(super) struct DeltaSnapshots {
    max_parallelism: usize,
    /// Checkpoints are incremental; without, every snapshot is whole.
    incremental: bool,
    /// By key group.
    key_groups: Vec<KeyGroupParts>,
    /// Groups changed since the previous snapshot, and a flag per group id.
    changed: Vec<u32>,
    is_changed: Vec<bool>,
    /// Groups (ids below this) that existed at the previous snapshot.
    known: usize,
    /// The next snapshot writes every group anew.
    whole: bool,
}

impl DeltaSnapshots {
    pub(super) fn new(max_parallelism: usize, incremental: bool) -> DeltaSnapshots {
        DeltaSnapshots {
            max_parallelism,
            incremental,
            key_groups: (0..max_parallelism)
                .map(|_| KeyGroupParts::default())
                .collect(),
            changed: Vec::new(),
            is_changed: Vec::new(),
            known: 0,
            whole: true,
        }
    }

    /// Groups `ids` changed.
    pub(super) fn changed(&mut self, ids: &[u32]) {
        for &g in ids {
            let at = g as usize;
            if at >= self.is_changed.len() {
                self.is_changed.resize(at + 1, false);
            }
            if !self.is_changed[at] {
                self.is_changed[at] = true;
                self.changed.push(g);
            }
        }
    }

    /// The group ids changed meaning (groups were dropped): the next snapshot writes every
    /// group.
    pub(super) fn start_over(&mut self) {
        self.changed.clear();
        self.is_changed.clear();
        self.whole = true;
    }

    /// Whether the next snapshot writes anything new (and so needs the groups' keys).
    pub(super) fn writes(&self) -> bool {
        self.whole || !self.incremental || !self.changed.is_empty()
    }

    /// Checkpoint `checkpoint` completed: the parts it wrote to the shared folder are
    /// referred to there from now on, and their bytes go.
    pub(super) fn completed(&mut self, checkpoint: CheckpointId) {
        if !self.incremental {
            return;
        }
        for part in self.key_groups.iter_mut().flat_map(|k| &mut k.parts) {
            if let Payload::Memory { bytes, since } = &part.payload
                && *since <= checkpoint.0
                && bytes.len() >= SHARED_MIN_BYTES
            {
                let shared = DiskPayload::in_shared_folder(shared_name(bytes), bytes.len() as u64);
                part.payload = Payload::Shared(shared);
            }
        }
    }

    /// Memory the parts' bytes take.
    pub(super) fn size(&self) -> usize {
        self.key_groups
            .iter()
            .flat_map(|k| &k.parts)
            .map(|p| {
                p.ids.capacity() * 4
                    + match &p.payload {
                        Payload::Memory { bytes, .. } => bytes.len(),
                        Payload::Shared(_) => 0,
                    }
            })
            .sum()
    }

    /// The snapshot of `groups` groups whose keys are `keys` (in id order, their first
    /// `hashed` columns hashed for the key group; none needed unless [`Self::writes`]):
    /// the parts written before, and new ones of the changed groups' rows, which
    /// `rows_of` builds.
    pub(super) fn snapshot(
        &mut self,
        checkpoint: CheckpointId,
        groups: usize,
        keys: &[ArrayRef],
        hashed: usize,
        rows_of: impl Fn(&[u32]) -> Result<RecordBatch>,
    ) -> Result<OperatorState> {
        if self.whole || !self.incremental {
            self.key_groups
                .iter_mut()
                .for_each(|k| *k = KeyGroupParts::default());
            self.changed = (0..groups as u32).collect();
            self.is_changed = vec![true; groups];
            self.known = 0;
            self.whole = false;
        }
        if !self.changed.is_empty() {
            for (kg, ids) in self.changed_by_key_group(keys, hashed)? {
                let k = &mut self.key_groups[kg];
                let mut last = ids;
                if k.rows() + last.len() > 2 * k.groups + SLACK_ROWS {
                    // Whole again: every group of the key group is in one of its parts.
                    last.extend(k.parts.drain(..).flat_map(|p| p.ids));
                } else {
                    while k.parts.last().is_some_and(|p| p.ids.len() < 2 * last.len()) {
                        last.extend(k.parts.pop().expect("a last part").ids);
                    }
                }
                last.sort_unstable();
                last.dedup();
                let bytes = encode_batch(&rows_of(&last)?)?;
                k.parts.push(Part {
                    ids: last,
                    payload: Payload::Memory {
                        bytes,
                        since: checkpoint.0,
                    },
                });
            }
            for g in self.changed.drain(..) {
                self.is_changed[g as usize] = false;
            }
        }
        self.known = groups;
        let mut state = OperatorState::new(StateDistribution::KeyGroups, Vec::new());
        for (kg, k) in self.key_groups.iter().enumerate() {
            for part in &k.parts {
                let payload = match &part.payload {
                    Payload::Memory { bytes, .. } => state.add_payload(bytes.clone()),
                    Payload::Shared(shared) => state.add_disk_payload(shared.clone()),
                };
                state
                    .items
                    .push(serde_json::json!({ "kg": kg, "payload": payload }));
            }
        }
        if !self.incremental {
            // Each snapshot is whole: nothing is kept for the next.
            self.key_groups
                .iter_mut()
                .for_each(|k| *k = KeyGroupParts::default());
        }
        Ok(state)
    }

    /// The changed groups by key group; groups new since the previous snapshot are
    /// counted into their key groups.
    fn changed_by_key_group(
        &mut self,
        keys: &[ArrayRef],
        hashed: usize,
    ) -> Result<BTreeMap<usize, Vec<u32>>> {
        let take = UInt32Array::from(self.changed.clone());
        let changed_keys = keys[..hashed]
            .iter()
            .map(|k| arrow::compute::take(k, &take, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let columns: Vec<&dyn Array> = changed_keys.iter().map(|c| c.as_ref()).collect();
        let hashes = hash_arrays(&columns, self.changed.len())?;
        let mut by_group: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
        for (g, h) in self.changed.iter().zip(hashes) {
            let kg = key_group(h, self.max_parallelism);
            by_group.entry(kg).or_default().push(*g);
            if *g as usize >= self.known {
                self.key_groups[kg].groups += 1;
            }
        }
        Ok(by_group)
    }
}
