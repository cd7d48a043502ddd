//! Snapshots and restores of a join's stored rows, incremental by epoch.
//!
//! A side's stored batches are split into *epochs*: the batches stored between two
//! snapshots form a new epoch when the second is taken. A snapshot writes each epoch's
//! rows as they are stored (Arrow IPC, one item `{"kgs": [first, last], "payload", "side",
//! "epoch"}` for the subtask's whole key-group range; see `JoinOperator::encode`), and
//! keeps the encoded parts of an epoch nobody changed since: the next snapshot hands the
//! same bytes again, without encoding them, and incremental checkpoints (see
//! `weir_runtime::state_file`) do not write them again. An epoch changes when one of its
//! rows is retracted or expires, or when the flag a row carries changes (a semi join's
//! kept row emitted, an outer row matched, a match count of an updating join). Epochs
//! merge like a binary counter — the newest into the one before while that one holds no
//! more rows, or is small — up to
//! [`MAX_MERGE_ROWS`]: a merge encodes both epochs again and the checkpoint writes what it
//! encodes, so unbounded merges made checkpoints write most of the state again (q20 at
//! 30M events with 1 s checkpoints: 40–63% of the state each). Below that size a side
//! keeps about log2(snapshots) epochs and each row is encoded again about log2 times;
//! larger epochs stay as they are until one of their rows changes.
//!
//! A side under a state memory budget (see [`weir_state::spill`]) keeps its epochs'
//! encoded parts as [`DiskPayload`]s named like shared payloads, so an incremental
//! checkpoint that has them already does not even read them: in memory, counted against
//! the budget, while there is room, else in local files.
//!
//! A restore stores every item's batches, epoch by epoch, and rebuilds the epochs with
//! the items' bytes as their encoded parts; an item written at another parallelism gives
//! only the rows of this subtask's key groups, and its epoch is encoded again.

use super::{JoinOperator, Side};
use crate::operators::state::item_batches;
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use bytes::Bytes;
use std::sync::Arc;
use weir_common::{CheckpointId, Result};
use weir_runtime::{OperatorState, StateDistribution};
use weir_state::checkpoint::{DiskPayload, SHARED_MIN_BYTES};
use weir_state::keyed::encode_batches;
use weir_state::spill::{SpillFile, StateMemory};

/// An epoch with fewer rows takes in the next one: every epoch costs an item (a shared
/// payload, with Arrow IPC's per-message overhead), which only pays for itself when the
/// epoch is large.
const MIN_EPOCH_ROWS: usize = 16_384;

/// Epochs merge only up to this many rows.
const MAX_MERGE_ROWS: usize = 1 << 20;

/// A side under a memory budget encodes an epoch this many rows at a time (its parts go
/// to disk chunk by chunk), so a snapshot needs little memory whatever the epoch's size.
const ENCODE_CHUNK_ROWS: usize = 1 << 17;

/// A part restored from disk counts as written for the first checkpoint that takes it.
const RESTORED: u64 = u64::MAX;

/// An encoded part of an epoch: in memory; named and in memory under a budget, counted
/// in its side's store ([`Epochs::held`]); or in a local file (or only in the shared
/// folder once a completed checkpoint wrote it). Named parts were written for checkpoint
/// `since`, or [`RESTORED`].
#[derive(Clone)]
pub(super) enum Part {
    Memory(Bytes),
    Held { payload: DiskPayload, since: u64 },
    Disk { payload: DiskPayload, since: u64 },
}

/// The key groups `first..=last` an encoded part holds rows of.
type Groups = (usize, usize);

/// Batches `start..` (up to the next epoch's start) of a side.
#[derive(Default)]
pub(super) struct Epoch {
    start: usize,
    rows: usize,
    /// The encoded parts of the epoch's rows, while none of its rows changed.
    encoded: Option<Vec<(Groups, Part)>>,
}

/// The epochs of a side, and where the unsealed batches start.
#[derive(Default)]
pub(super) struct Epochs {
    epochs: Vec<Epoch>,
    sealed: usize,
}

impl Epochs {
    /// Stored batch `b` changed: its epoch is encoded again at the next snapshot.
    pub(super) fn touch(&mut self, b: usize) {
        if b >= self.sealed {
            return; // Not snapshotted yet.
        }
        let at = self.epochs.partition_point(|e| e.start <= b);
        if let Some(epoch) = at.checked_sub(1).and_then(|e| self.epochs.get_mut(e)) {
            epoch.encoded = None;
        }
    }

    /// Incremental checkpoint `checkpoint` completed: the parts it wrote to the shared
    /// folder (those large enough to be shared objects) are read from there from now on,
    /// and their local copies go. Every later checkpoint refers to them while their epoch
    /// is unchanged, so the task's uploader knows they exist and never reads them.
    pub(super) fn completed(&mut self, checkpoint: CheckpointId) {
        for epoch in &mut self.epochs {
            for (_, part) in epoch.encoded.iter_mut().flatten() {
                if let Part::Disk { payload, since } | Part::Held { payload, since } = part
                    && *since <= checkpoint.0
                    && payload.size >= SHARED_MIN_BYTES as u64
                {
                    let payload = payload.shared_only();
                    *part = Part::Disk {
                        payload,
                        since: *since,
                    };
                }
            }
        }
    }

    /// Bytes of the encoded parts held in memory under a budget, which the side's store
    /// counts against it until a completed checkpoint wrote them.
    pub(super) fn held(&self) -> u64 {
        (self.epochs.iter())
            .flat_map(|e| e.encoded.iter().flatten())
            .map(|(_, part)| match part {
                Part::Held { payload, .. } => payload.size,
                _ => 0,
            })
            .sum()
    }

    /// Every stored batch was rebuilt: there are no epochs any more.
    pub(super) fn reset(&mut self) {
        *self = Epochs::default();
    }

    /// Seals the batches stored since the last snapshot as a new epoch (of `rows` rows),
    /// then merges epochs like a binary counter, up to `max_merge` rows.
    fn seal(&mut self, batches: usize, rows: usize, max_merge: usize) {
        if batches > self.sealed {
            self.epochs.push(Epoch {
                start: self.sealed,
                rows,
                encoded: None,
            });
            self.sealed = batches;
        }
        while let [.., before, last] = &self.epochs[..] {
            if before.rows > last.rows && before.rows >= MIN_EPOCH_ROWS
                || before.rows + last.rows > max_merge
            {
                break;
            }
            let last = self.epochs.pop().expect("two epochs");
            let before = self.epochs.last_mut().expect("two epochs");
            before.rows += last.rows;
            before.encoded = None;
        }
    }

    /// The batch range of each epoch.
    fn ranges(&self) -> Vec<std::ops::Range<usize>> {
        let ends = self
            .epochs
            .iter()
            .skip(1)
            .map(|e| e.start)
            .chain([self.sealed]);
        self.epochs
            .iter()
            .zip(ends)
            .map(|(e, end)| e.start..end)
            .collect()
    }
}

impl JoinOperator {
    pub(super) fn snapshot(&mut self, checkpoint: CheckpointId) -> Result<OperatorState> {
        let mut state = OperatorState::new(StateDistribution::KeyGroups, Vec::new());
        for s in 0..2 {
            // Where this snapshot's newly encoded parts wait on disk, if they do.
            let mut keep_file: Option<std::sync::Arc<SpillFile>> = None;
            let side = &mut self.sides[s];
            let batches = side.stored.len();
            let unsealed = side.epochs.sealed.min(batches)..batches;
            let rows = unsealed.map(|b| side.stored.rows(b)).sum();
            side.epochs.seal(batches, rows, MAX_MERGE_ROWS);
            for (e, range) in side.epochs.ranges().into_iter().enumerate() {
                let kept = &mut self.sides[s].epochs.epochs[e].encoded;
                for (_, part) in kept.iter_mut().flatten() {
                    if let Part::Disk { since, .. } = part
                        && *since == RESTORED
                    {
                        *since = checkpoint.0;
                    }
                }
                let kept = kept.clone();
                let parts = match kept {
                    Some(parts) => parts,
                    None => {
                        // Under a memory budget the parts wait for the next checkpoint
                        // in memory, counted against the budget, while there is room and
                        // a completed checkpoint frees them (incremental checkpoints);
                        // otherwise they are encoded a chunk at a time and wait on disk.
                        let memory = self.sides[s].stored.memory();
                        let on_disk = memory
                            .filter(|m| !(self.incremental && self.room_for(s, range.clone(), m)));
                        let mut parts: Vec<(Groups, Part)> = Vec::new();
                        for chunk in self.chunks(s, range, on_disk.is_some()) {
                            let encoded = self.encode(s, chunk)?;
                            match (memory, on_disk) {
                                (Some(_), None) => {
                                    parts.extend(encoded.into_iter().map(|(groups, bytes)| {
                                        let payload = DiskPayload::in_memory(bytes);
                                        let since = checkpoint.0;
                                        (groups, Part::Held { payload, since })
                                    }));
                                }
                                (_, Some(memory)) => {
                                    let file = SpillFile::in_slot(&mut keep_file, memory)?;
                                    parts.extend(file.keep(encoded)?.into_iter().map(
                                        |(groups, payload)| {
                                            let since = checkpoint.0;
                                            (groups, Part::Disk { payload, since })
                                        },
                                    ));
                                }
                                (None, None) => parts
                                    .extend(encoded.into_iter().map(|(g, b)| (g, Part::Memory(b)))),
                            }
                        }
                        let side = &mut self.sides[s];
                        side.epochs.epochs[e].encoded = Some(parts.clone());
                        // Held parts count against the budget from now on.
                        side.stored.set_overhead(side.overhead())?;
                        parts
                    }
                };
                for ((first, last), part) in parts {
                    let payload = match part {
                        Part::Memory(bytes) => state.add_payload(bytes),
                        Part::Held { payload, .. } | Part::Disk { payload, .. } => {
                            state.add_disk_payload(payload)
                        }
                    };
                    let mut item = weir_state::keyed::key_groups_fields(first, last);
                    item["payload"] = payload;
                    item["side"] = s.into();
                    item["epoch"] = e.into();
                    state.items.push(item);
                }
            }
        }
        if self.null_aware {
            // The right side's row and NULL counts: a null-aware anti join runs in one
            // subtask, which owns key group 0.
            state.items.push(serde_json::json!({
                "kg": 0,
                "right_rows": self.right_rows,
                "right_nulls": self.right_nulls,
            }));
        }
        Ok(state)
    }

    /// Whether the encoded rows of batches `range` of side `s` can wait for their
    /// checkpoint in memory: the side has all its rows in memory and the budget has room
    /// for about as many bytes as those rows take.
    fn room_for(&self, s: usize, range: std::ops::Range<usize>, memory: &StateMemory) -> bool {
        let stored = &self.sides[s].stored;
        let (resident, _) = stored.bytes();
        let all: usize = (0..stored.len()).map(|b| stored.rows(b)).sum();
        let rows: usize = range.map(|b| stored.rows(b)).sum();
        let estimate = resident as u128 * rows as u128 / all.max(1) as u128;
        !stored.spilling() && memory.has_room(estimate as u64)
    }

    /// Batches `range` of side `s` in chunks of about [`ENCODE_CHUNK_ROWS`] rows (`chunked`),
    /// or whole.
    fn chunks(
        &self,
        s: usize,
        range: std::ops::Range<usize>,
        chunked: bool,
    ) -> Vec<std::ops::Range<usize>> {
        if !chunked {
            return vec![range];
        }
        let mut chunks = Vec::new();
        let (mut start, mut rows) = (range.start, 0);
        for b in range.clone() {
            rows += self.sides[s].stored.rows(b);
            if rows >= ENCODE_CHUNK_ROWS {
                chunks.push(start..b + 1);
                (start, rows) = (b + 1, 0);
            }
        }
        if start < range.end || chunks.is_empty() {
            chunks.push(start..range.end);
        }
        chunks
    }

    /// The live rows of batches `range` of side `s` (with their flags, for a flagged
    /// side), encoded as one part of every key group this subtask owns (none if no row is
    /// live). The stored batches are written as they are, one copy; split by key group
    /// they were copied twice more (gathered, then taken apart), which made q20's
    /// snapshots a quarter of its CPU with 1 s checkpoints. A restore at another
    /// parallelism gives the part to each subtask owning one of its key groups, which
    /// keeps its own rows.
    fn encode(&self, s: usize, range: std::ops::Range<usize>) -> Result<Vec<(Groups, Bytes)>> {
        let side: &Side = &self.sides[s];
        let with_dead: std::collections::HashSet<usize> =
            side.dead.iter().map(|(b, _)| *b).collect();
        let mut batches = Vec::with_capacity(range.len());
        for b in range {
            let batch = side.stored.get(b)?;
            let batch = match self.flagged(s) {
                true => self.with_flags(s, b, &batch)?,
                false => batch,
            };
            // Rows with a NULL key never match and retracted rows are gone: neither is
            // kept. (A null-aware anti join keeps its left rows with NULL keys: they are
            // emitted while the right is empty.)
            let keep_nulls = self.null_aware && s == 0;
            let nulls = !keep_nulls && side.keys.iter().any(|k| batch.column(*k).null_count() > 0);
            let batch = if nulls || with_dead.contains(&b) {
                let live: arrow::array::BooleanArray = (0..batch.num_rows())
                    .map(|row| {
                        Some(
                            (keep_nulls
                                || side.keys.iter().all(|k| !batch.column(*k).is_null(row)))
                                && !side.dead.contains(&(b, row)),
                        )
                    })
                    .collect();
                arrow::compute::filter_record_batch(&batch, &live)?
            } else {
                batch
            };
            if batch.num_rows() > 0 {
                batches.push(batch);
            }
        }
        let Some(schema) = batches.first().map(|b| b.schema()) else {
            return Ok(Vec::new());
        };
        let groups = (self.key_groups.start, self.key_groups.end - 1);
        Ok(vec![(groups, encode_batches(&schema, &batches)?)])
    }

    /// The rows of `batch` (restored for side `s`) whose key group this subtask owns.
    fn own_rows(&self, s: usize, batch: &RecordBatch) -> Result<RecordBatch> {
        let hashes = weir_state::key::hash_rows(batch, &self.sides[s].keys)?;
        let mine: arrow::array::BooleanArray = hashes
            .iter()
            .map(|h| {
                let kg = weir_state::key::key_group(*h, self.max_parallelism);
                Some(self.key_groups.contains(&kg))
            })
            .collect();
        Ok(arrow::compute::filter_record_batch(batch, &mine)?)
    }

    /// Stored batch `b` of side `s` with its rows' flags as a last column `__emitted`:
    /// whether each matched (append-only inputs) or how many rows match it (updating
    /// inputs).
    fn with_flags(&self, s: usize, b: usize, batch: &RecordBatch) -> Result<RecordBatch> {
        let side = &self.sides[s];
        let flags: ArrayRef = if self.updating {
            Arc::new(
                (0..batch.num_rows())
                    .map(|i| Some(*side.matches.get(&(b, i)).unwrap_or(&0)))
                    .collect::<arrow::array::UInt32Array>(),
            )
        } else {
            Arc::new(
                side.emitted[b]
                    .iter()
                    .map(|f| Some(*f))
                    .collect::<arrow::array::BooleanArray>(),
            )
        };
        let mut fields: Vec<arrow::datatypes::Field> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(arrow::datatypes::Field::new(
            "__emitted",
            flags.data_type().clone(),
            true,
        ));
        let mut columns = batch.columns().to_vec();
        columns.push(flags);
        Ok(RecordBatch::try_new(
            Arc::new(arrow::datatypes::Schema::new(fields)),
            columns,
        )?)
    }

    /// Stores the rows of a restored snapshot, epoch by epoch.
    pub(super) fn restore(&mut self, restored: OperatorState) -> Result<()> {
        let mut items: Vec<&serde_json::Value> = restored.items.iter().collect();
        let epoch = |item: &serde_json::Value| item.get("epoch").and_then(|e| e.as_u64());
        let side_of = |item: &serde_json::Value| item["side"].as_u64().unwrap_or(0) as usize;
        items.sort_by_key(|item| (side_of(item), epoch(item)));
        let mut current: [Option<u64>; 2] = [None, None];
        for item in items {
            if let Some(rows) = item.get("right_rows").and_then(|v| v.as_u64()) {
                self.right_rows += rows;
                self.right_nulls += item["right_nulls"].as_u64().unwrap_or(0);
                continue;
            }
            let side = side_of(item);
            let mut batches = item_batches(&restored, item)?;
            // The item's bytes are the epoch's encoding in this subtask too (with their
            // rows' flags), so the next snapshot does not encode them again; one the
            // restore left on disk stays there. An item holding key groups this subtask
            // does not own (written at another parallelism) gives only its own rows, and
            // its epoch is encoded again.
            let groups = weir_state::keyed::item_key_groups(item, self.max_parallelism)?;
            let owned =
                self.key_groups.contains(groups.start()) && self.key_groups.contains(groups.end());
            if !owned {
                batches = batches
                    .iter()
                    .map(|b| self.own_rows(side, b))
                    .filter(|b| !matches!(b, Ok(b) if b.num_rows() == 0))
                    .collect::<Result<_>>()?;
            }
            let part = match restored.item_disk_payload(item) {
                Some(payload) => Part::Disk {
                    payload: payload.clone(),
                    since: RESTORED,
                },
                None => Part::Memory(restored.payload(item)?),
            };
            let stored = &mut self.sides[side];
            if current[side] != Some(epoch(item).unwrap_or(0)) {
                current[side] = Some(epoch(item).unwrap_or(0));
                stored.epochs.epochs.push(Epoch {
                    start: stored.stored.len(),
                    encoded: Some(Vec::new()),
                    ..Default::default()
                });
            }
            let epoch = stored.epochs.epochs.last_mut().expect("an epoch");
            match (owned, &mut epoch.encoded) {
                (true, Some(parts)) => parts.push(((*groups.start(), *groups.end()), part)),
                _ => epoch.encoded = None,
            }
            for batch in batches {
                // A flagged side (semi join kept side, outer side) carries an `__emitted`
                // column after its own.
                let n = self.inputs[side].fields().len();
                let data =
                    RecordBatch::try_new(self.inputs[side].clone(), batch.columns()[..n].to_vec())?;
                let stored = &mut self.sides[side];
                stored.epochs.epochs.last_mut().expect("an epoch").rows += data.num_rows();
                stored.store(data)?;
                if batch.num_columns() > n {
                    let b = stored.stored.len() - 1;
                    let flags = batch.column(n);
                    if let Some(counts) = flags.as_primitive_opt::<arrow::datatypes::UInt32Type>() {
                        for (i, c) in counts.iter().enumerate() {
                            if let Some(c) = c.filter(|c| *c > 0) {
                                stored.matches.insert((b, i), c);
                            }
                        }
                    } else {
                        let flags = flags.as_boolean();
                        for (i, f) in flags.iter().enumerate() {
                            stored.emitted[b][i] = f.unwrap_or(false);
                        }
                    }
                }
            }
        }
        for side in &mut self.sides {
            side.epochs.sealed = side.stored.len();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(e: &Epochs) -> Vec<usize> {
        e.epochs.iter().map(|e| e.rows).collect()
    }

    /// Equal intervals merge like a binary counter: about log2(snapshots) epochs, each
    /// covering the batches after the one before.
    #[test]
    fn epochs_merge_like_a_binary_counter() {
        let n = MIN_EPOCH_ROWS;
        let mut e = Epochs::default();
        for snapshot in 1..=7 {
            e.seal(snapshot * 2, n, usize::MAX);
        }
        assert_eq!(sizes(&e), [4 * n, 2 * n, n]);
        assert_eq!(e.ranges(), [0..8, 8..12, 12..14]);
        e.seal(16, n, usize::MAX);
        assert_eq!(sizes(&e), [8 * n]);
        // No new batches: nothing to seal, nothing merges.
        e.seal(16, 0, usize::MAX);
        assert_eq!(e.ranges(), vec![0..16_usize]);
        // Small epochs gather until they are worth keeping apart.
        e.seal(17, 10, usize::MAX);
        e.seal(18, 10, usize::MAX);
        assert_eq!(sizes(&e), [8 * n, 20]);
    }

    #[test]
    fn a_changed_batch_clears_its_epochs_encoding_only() {
        let mut e = Epochs::default();
        e.seal(4, 2 * MIN_EPOCH_ROWS, usize::MAX);
        e.seal(6, MIN_EPOCH_ROWS, usize::MAX);
        for epoch in &mut e.epochs {
            epoch.encoded = Some(Vec::new());
        }
        e.touch(6); // stored after the last snapshot
        assert!(e.epochs.iter().all(|e| e.encoded.is_some()));
        e.touch(5);
        assert!(e.epochs[0].encoded.is_some());
        assert!(e.epochs[1].encoded.is_none());
        e.touch(0);
        assert!(e.epochs[0].encoded.is_none());
    }
}
