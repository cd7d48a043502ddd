//! Keyed entries larger than memory. An operator whose state is a map from keys to values
//! (Top-N's partitions, an aggregate's groups) keeps its recently used entries in its own
//! map and moves the coldest ones here while the job's keyed state is over its budget
//! (`taskmanager.memory.managed.size`, see [`crate::spill`]). When a key comes back, the
//! operator takes its entry out of here again.
//!
//! - **On disk**: each entry is its key's and value's bytes (the operator's encoding)
//!   appended to segment files under `io.tmp.dirs`, unlinked as soon as they are created,
//!   as the spilled batches of [`crate::spill`] are. Writes are buffered and go out 64 KiB
//!   at a time.
//! - **In memory**: an index from the key's 64-bit hash ([`hash`]) to where the entry is,
//!   about 40 bytes a key, counted against the budget. Two keys of one hash cannot both
//!   be here: the second stays in the operator's map ([`ColdEntries::put`] says so).
//! - **Space**: an entry taken back leaves a hole. Once the segments hold more than twice
//!   the live bytes (and two segments), the segments that are mostly holes are
//!   rewritten and deleted.
//! - **Time to live**: each entry keeps the time it was last used, so that the state TTL
//!   drops entries on disk as it drops those in memory ([`ColdEntries::expire`]).

use crate::spill::{SpillFile, StateMemory};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use weir_common::{Error, Result};

/// A new segment file is started once the current one holds this much.
const SEGMENT_BYTES: u64 = 64 << 20;
/// Buffered writes go out once this much is pending.
const WRITE_BUFFER: usize = 64 << 10;
/// What one entry of the index costs in memory (key, location, and the table's slack).
pub const INDEX_ENTRY_BYTES: u64 = 40;

/// The hash [`ColdEntries`] finds a key by: XXH3 of the key's bytes.
pub fn hash(key: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(key)
}

/// The keys an operator holding `hot` bytes in memory moves here to hold at most
/// `target`: the least recently used first. `entries` gives each key and its last use;
/// `bytes` what a key takes in memory (asked only of the keys that move). Returns the keys
/// and their bytes; none when `hot` is within `target`.
pub fn least_recently_used<K>(
    entries: impl Iterator<Item = (K, u64)>,
    bytes: impl Fn(&K) -> u64,
    hot: u64,
    target: u64,
) -> Vec<(K, u64)> {
    if hot <= target {
        return Vec::new();
    }
    let mut by_age: Vec<(u64, K)> = entries.map(|(k, used)| (used, k)).collect();
    by_age.sort_unstable_by_key(|(used, _)| *used);
    let mut freed = 0;
    let mut moving = Vec::new();
    for (_, key) in by_age {
        if hot.saturating_sub(freed) <= target {
            break;
        }
        let n = bytes(&key);
        freed += n;
        moving.push((key, n));
    }
    moving
}

/// Hashing for tables whose keys are hashes already: one multiplication spreads every bit
/// of the key over the bits the table uses (a subtask's key hashes share their residues
/// modulo the key groups, so their low bits alone would crowd a few buckets).
pub type HashOfHash = BuildHasherDefault<Mixed>;

/// The [`Hasher`] of [`HashOfHash`].
#[derive(Default)]
pub struct Mixed(u64);

impl Hasher for Mixed {
    fn finish(&self) -> u64 {
        let x = self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^ (x >> 32)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Where an entry is, and when it was last used.
#[derive(Clone, Copy)]
struct Loc {
    at: u64,
    stamp: u64,
    segment: u32,
    len: u32,
}

struct Segment {
    file: Arc<SpillFile>,
    /// Bytes of entries in it still in the index.
    live: u64,
}

/// The entries an operator moved out of memory (see the module docs). Without a
/// [`StateMemory`] nothing ever moves here.
pub struct ColdEntries {
    memory: Option<Arc<StateMemory>>,
    index: HashMap<u64, Loc, HashOfHash>,
    segments: Vec<Option<Segment>>,
    /// Bytes appended to the last segment but not written yet.
    pending: Vec<u8>,
    /// Bytes the operator holds in memory (as it last said).
    hot: u64,
    /// Bytes this store counts in the budget now.
    counted: u64,
    /// Bytes of the entries on disk.
    live: u64,
    /// Bytes of all segment files (holes included).
    file_bytes: u64,
    /// A new segment is started once the last holds this much.
    segment_bytes: u64,
}

impl ColdEntries {
    pub fn new(memory: Option<Arc<StateMemory>>) -> Self {
        if let Some(m) = &memory {
            m.stores.fetch_add(1, Ordering::Relaxed);
        }
        Self {
            memory,
            index: HashMap::default(),
            segments: Vec::new(),
            pending: Vec::new(),
            hot: 0,
            counted: 0,
            live: 0,
            file_bytes: 0,
            segment_bytes: SEGMENT_BYTES,
        }
    }

    /// Entries on disk.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Bytes of the entries on disk.
    pub fn on_disk(&self) -> u64 {
        self.live
    }

    /// Whether key `hash` may be here (a different key of the same hash may be).
    pub fn may_hold(&self, hash: u64) -> bool {
        self.index.contains_key(&hash)
    }

    /// Tells the budget that the operator's entries in memory hold `bytes` now. True when
    /// the operator should move its coldest entries here, until it holds
    /// [`Self::hot_target`] bytes.
    pub fn set_hot(&mut self, bytes: u64) -> bool {
        self.hot = bytes;
        self.recount();
        self.memory.as_ref().is_some_and(|m| m.over(self.counted))
    }

    /// What the operator's entries in memory may hold after it moved entries here:
    /// three quarters of its share of the budget, less what the index and the write
    /// buffer take.
    pub fn hot_target(&self) -> u64 {
        self.memory.as_ref().map_or(u64::MAX, |m| {
            (m.share() / 4 * 3)
                .saturating_sub(self.index.len() as u64 * INDEX_ENTRY_BYTES + WRITE_BUFFER as u64)
        })
    }

    fn recount(&mut self) {
        let now =
            self.hot + self.index.len() as u64 * INDEX_ENTRY_BYTES + self.pending.len() as u64;
        if let Some(m) = &self.memory {
            m.used.fetch_add(now, Ordering::Relaxed);
            m.used.fetch_sub(self.counted, Ordering::Relaxed);
        }
        self.counted = now;
    }

    /// Moves the entry of `key` (its bytes and `hash`) here, last used at `stamp`. False,
    /// with nothing written, when another key of the same hash is here already: the
    /// operator keeps this one in memory.
    pub fn put(&mut self, hash: u64, key: &[u8], value: &[u8], stamp: u64) -> Result<bool> {
        if self.index.contains_key(&hash) {
            return Ok(false);
        }
        let memory = self
            .memory
            .clone()
            .ok_or_else(|| Error::internal("state moved to disk without a memory budget"))?;
        let len = 4 + key.len() + value.len();
        let len32 = u32::try_from(len).map_err(|_| {
            Error::external(format!(
                "a state entry of {len} bytes is too large to move to disk"
            ))
        })?;
        let current = match self.segments.last() {
            Some(Some(s)) if s.file.len() + (self.pending.len() as u64) < self.segment_bytes => {
                self.segments.len() - 1
            }
            _ => {
                self.flush()?;
                if self.segments.is_empty() {
                    memory.announce("moving the least recently used keys");
                }
                self.segments.push(Some(Segment {
                    file: SpillFile::create(&memory)?,
                    live: 0,
                }));
                self.segments.len() - 1
            }
        };
        let segment = self.segments[current].as_mut().expect("just chosen");
        let at = segment.file.len() + self.pending.len() as u64;
        segment.live += len as u64;
        self.pending
            .extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.pending.extend_from_slice(key);
        self.pending.extend_from_slice(value);
        self.index.insert(
            hash,
            Loc {
                at,
                stamp,
                segment: current as u32,
                len: len32,
            },
        );
        self.live += len as u64;
        self.file_bytes += len as u64;
        if self.pending.len() >= WRITE_BUFFER {
            self.flush()?;
        }
        Ok(true)
    }

    /// Writes what is pending to the last segment.
    fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        if let Some(Some(s)) = self.segments.last() {
            s.file.append(&self.pending)?;
        }
        self.pending.clear();
        Ok(())
    }

    /// The bytes of the entry at `loc`.
    fn read(&self, loc: Loc) -> Result<Vec<u8>> {
        let segment = self.segments[loc.segment as usize]
            .as_ref()
            .ok_or_else(|| Error::internal("a state entry in a deleted segment"))?;
        let written = segment.file.len();
        if loc.at >= written {
            let from = (loc.at - written) as usize;
            return Ok(self.pending[from..from + loc.len as usize].to_vec());
        }
        Ok(segment.file.read(loc.at, u64::from(loc.len))?.to_vec())
    }

    /// The entry of `hash`'s key (its key's bytes, then its value's), if `key` is it.
    fn find(&self, hash: u64, key: &[u8]) -> Result<Option<(Loc, Vec<u8>)>> {
        let Some(loc) = self.index.get(&hash).copied() else {
            return Ok(None);
        };
        let bytes = self.read(loc)?;
        let (stored, _) = split(&bytes)?;
        Ok((stored == key).then_some((loc, bytes)))
    }

    /// The value of `key` (of hash `hash`), left here.
    pub fn get(&self, hash: u64, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self
            .find(hash, key)?
            .map(|(_, bytes)| split(&bytes).expect("read").1.to_vec()))
    }

    /// The entry under `hash` (there is one at most): its key and its value, left here.
    pub fn get_by_hash(&self, hash: u64) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let Some(loc) = self.index.get(&hash).copied() else {
            return Ok(None);
        };
        let bytes = self.read(loc)?;
        let (key, value) = split(&bytes)?;
        Ok(Some((key.to_vec(), value.to_vec())))
    }

    /// The hashes of the entries here.
    pub fn hashes(&self) -> impl Iterator<Item = u64> + '_ {
        self.index.keys().copied()
    }

    /// Takes the entry of `key` (of hash `hash`) out: its value and when it was last used.
    pub fn take(&mut self, hash: u64, key: &[u8]) -> Result<Option<(Vec<u8>, u64)>> {
        let Some((loc, bytes)) = self.find(hash, key)? else {
            return Ok(None);
        };
        self.forget(hash, loc)?;
        let (_, value) = split(&bytes)?;
        Ok(Some((value.to_vec(), loc.stamp)))
    }

    /// Takes the entry under `hash` out (there is one at most): its key and its value.
    pub fn take_by_hash(&mut self, hash: u64) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let Some(loc) = self.index.get(&hash).copied() else {
            return Ok(None);
        };
        let bytes = self.read(loc)?;
        self.forget(hash, loc)?;
        let (key, value) = split(&bytes)?;
        Ok(Some((key.to_vec(), value.to_vec())))
    }

    fn forget(&mut self, hash: u64, loc: Loc) -> Result<()> {
        self.index.remove(&hash);
        self.live -= u64::from(loc.len);
        let last = self.segments.len() - 1;
        let segment = self.segments[loc.segment as usize]
            .as_mut()
            .expect("a live entry's segment");
        segment.live -= u64::from(loc.len);
        if segment.live == 0 && loc.segment as usize != last {
            self.file_bytes -= segment.file.len();
            self.segments[loc.segment as usize] = None;
        }
        if self.file_bytes > 2 * (self.live + self.segment_bytes) {
            self.compact()?;
        }
        Ok(())
    }

    /// Drops the entries last used before `cutoff`; returns how many.
    pub fn expire(&mut self, cutoff: u64) -> Result<usize> {
        let old: Vec<(u64, Loc)> = self
            .index
            .iter()
            .filter(|(_, loc)| loc.stamp < cutoff)
            .map(|(h, loc)| (*h, *loc))
            .collect();
        for (hash, loc) in &old {
            self.forget(*hash, *loc)?;
        }
        if !old.is_empty() {
            self.recount();
        }
        Ok(old.len())
    }

    /// Hands every entry (key, value) to `f`, in the order they are on disk.
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        let mut locs: Vec<Loc> = self.index.values().copied().collect();
        locs.sort_unstable_by_key(|l| (l.segment, l.at));
        for loc in locs {
            let bytes = self.read(loc)?;
            let (key, value) = split(&bytes)?;
            f(key, value)?;
        }
        Ok(())
    }

    /// Drops every entry.
    pub fn clear(&mut self) {
        self.index.clear();
        self.segments.clear();
        self.pending.clear();
        self.live = 0;
        self.file_bytes = 0;
        self.recount();
    }

    /// Rewrites the entries of segments that are mostly holes into the last segment,
    /// and deletes those segments.
    fn compact(&mut self) -> Result<()> {
        self.flush()?;
        let last = self.segments.len() - 1;
        let sparse: Vec<bool> = self
            .segments
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.as_ref()
                    .is_some_and(|s| i != last && s.live * 2 < s.file.len())
            })
            .collect();
        let moving: Vec<(u64, Loc)> = self
            .index
            .iter()
            .filter(|(_, loc)| sparse[loc.segment as usize])
            .map(|(h, loc)| (*h, *loc))
            .collect();
        for (hash, loc) in moving {
            let bytes = self.read(loc)?;
            let (key, value) = split(&bytes)?;
            let (key, value) = (key.to_vec(), value.to_vec());
            self.index.remove(&hash);
            self.live -= u64::from(loc.len);
            self.put(hash, &key, &value, loc.stamp)?;
        }
        self.flush()?;
        for (i, sparse) in sparse.into_iter().enumerate() {
            if sparse && let Some(s) = self.segments[i].take() {
                self.file_bytes -= s.file.len();
            }
        }
        Ok(())
    }
}

/// An entry's bytes as its key's and its value's.
fn split(bytes: &[u8]) -> Result<(&[u8], &[u8])> {
    let corrupt = || Error::internal("a state entry read back from local disk is corrupt");
    let len = u32::from_le_bytes(bytes.get(..4).ok_or_else(corrupt)?.try_into().expect("4"));
    let rest = &bytes[4..];
    if rest.len() < len as usize {
        return Err(corrupt());
    }
    Ok(rest.split_at(len as usize))
}

impl Drop for ColdEntries {
    fn drop(&mut self) {
        if let Some(m) = &self.memory {
            m.used.fetch_sub(self.counted, Ordering::Relaxed);
            m.stores.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(k: u64) -> Vec<u8> {
        format!("value of {k}: {}", "x".repeat((k % 50) as usize)).into_bytes()
    }

    /// Entries moved out come back equal, once; gets leave them; expiry drops the old
    /// ones; and the budget counts the index, not the entries.
    #[test]
    fn entries_move_out_and_come_back_equal() {
        let tmp = tempfile::tempdir().unwrap();
        let memory = StateMemory::new(1 << 20, tmp.path().to_path_buf());
        let mut cold = ColdEntries::new(Some(memory.clone()));
        assert!(!cold.set_hot(512 << 10), "under budget");
        assert!(cold.set_hot(2 << 20), "over budget");
        for k in 0..20_000u64 {
            let key = k.to_le_bytes();
            assert!(cold.put(hash(&key), &key, &value(k), k).unwrap());
        }
        cold.set_hot(0);
        assert_eq!(cold.len(), 20_000);
        assert_eq!(
            memory.used(),
            20_000 * INDEX_ENTRY_BYTES + cold.pending.len() as u64
        );
        let key = 7u64.to_le_bytes();
        assert_eq!(cold.get(hash(&key), &key).unwrap(), Some(value(7)));
        assert_eq!(cold.take(hash(&key), &key).unwrap(), Some((value(7), 7)));
        assert_eq!(cold.take(hash(&key), &key).unwrap(), None, "taken once");
        let key = 9u64.to_le_bytes();
        assert_eq!(
            cold.get_by_hash(hash(&key)).unwrap(),
            Some((key.to_vec(), value(9)))
        );
        assert_eq!(cold.hashes().count(), 19_999);
        let key = 11u64.to_le_bytes();
        assert_eq!(
            cold.take_by_hash(hash(&key)).unwrap(),
            Some((key.to_vec(), value(11)))
        );
        assert_eq!(cold.take_by_hash(hash(&key)).unwrap(), None, "taken once");
        // Another key under a taken hash is not found.
        assert_eq!(cold.get(hash(&8u64.to_le_bytes()), &key).unwrap(), None);
        let mut seen = 0;
        cold.for_each(|k, v| {
            let k = u64::from_le_bytes(k.try_into().unwrap());
            assert_eq!(v, value(k));
            seen += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, 19_998);
        assert_eq!(cold.expire(10_000).unwrap(), 9_998);
        assert_eq!(cold.len(), 10_000);
        let key = 12_345u64.to_le_bytes();
        assert_eq!(
            cold.take(hash(&key), &key).unwrap(),
            Some((value(12_345), 12_345))
        );
        cold.clear();
        assert_eq!(memory.used(), 0);
        drop(cold);
        assert_eq!(memory.share(), 1 << 20, "the store left the budget");
    }

    /// The least recently used keys move first, until what stays is within the target;
    /// their bytes are asked of them only.
    #[test]
    fn the_least_recently_used_keys_move_until_the_rest_fits() {
        let used = [("c", 30), ("a", 10), ("d", 40), ("b", 20)];
        let asked = std::cell::RefCell::new(Vec::new());
        let bytes = |k: &&str| {
            asked.borrow_mut().push(k.to_string());
            100
        };
        let moving = least_recently_used(used.iter().map(|(k, u)| (*k, *u)), bytes, 400, 150);
        assert_eq!(moving, vec![("a", 100), ("b", 100), ("c", 100)]);
        assert_eq!(*asked.borrow(), vec!["a", "b", "c"]);
        let none = least_recently_used(used.iter().map(|(k, u)| (*k, *u)), |_| 100, 400, 400);
        assert!(none.is_empty());
    }

    /// A key whose hash another key on disk has stays with the operator.
    #[test]
    fn a_second_key_of_one_hash_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let memory = StateMemory::new(1, tmp.path().to_path_buf());
        let mut cold = ColdEntries::new(Some(memory));
        assert!(cold.put(42, b"a", b"1", 0).unwrap());
        assert!(!cold.put(42, b"b", b"2", 0).unwrap());
        assert_eq!(cold.take(42, b"b").unwrap(), None);
        assert_eq!(cold.take(42, b"a").unwrap(), Some((b"1".to_vec(), 0)));
    }

    /// Entries taken back leave holes; segments that are mostly holes are rewritten, so
    /// the files stay within twice the live bytes (and two segments), and every entry left
    /// reads back equal.
    #[test]
    fn holes_are_compacted_away() {
        let tmp = tempfile::tempdir().unwrap();
        let memory = StateMemory::new(1, tmp.path().to_path_buf());
        let mut cold = ColdEntries::new(Some(memory));
        cold.segment_bytes = 1 << 20;
        let big = vec![7u8; 4 << 10];
        let mut round = 0u64;
        // Keys 0..1000 stay; others come and go, 6,000 of them in all (24 MB written).
        for k in 0..1000u64 {
            let key = k.to_le_bytes();
            cold.put(hash(&key), &key, &value(k), 0).unwrap();
        }
        for k in 1000..7000u64 {
            let key = k.to_le_bytes();
            cold.put(hash(&key), &key, &big, 0).unwrap();
            if k % 3 != 0 {
                assert!(cold.take(hash(&key), &key).unwrap().is_some());
            }
            round += 1;
            assert!(cold.file_bytes <= 2 * (cold.live + cold.segment_bytes));
        }
        assert!(
            round > 0 && cold.segments.iter().any(|s| s.is_none()),
            "no segment was deleted"
        );
        for k in 0..1000u64 {
            let key = k.to_le_bytes();
            assert_eq!(cold.get(hash(&key), &key).unwrap(), Some(value(k)));
        }
        for k in (1002..7000u64).step_by(3) {
            let key = k.to_le_bytes();
            assert_eq!(
                cold.get(hash(&key), &key).unwrap(),
                Some(big.clone()),
                "key {k}"
            );
        }
    }
}
