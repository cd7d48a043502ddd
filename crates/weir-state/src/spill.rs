//! State larger than memory: operators keep their stored rows in a [`BatchStore`], which
//! moves the oldest batches to local disk (Arrow IPC, in files under `io.tmp.dirs`) while
//! the job's keyed state holds more than its memory budget
//! (`taskmanager.memory.managed.size`), and reads them back when they are needed.
//!
//! - **Budget**: one [`StateMemory`] per job counts the bytes every store holds in
//!   memory. A store spills while the job is over budget *and* the store holds more than
//!   its fair share (the budget divided by the stores), so the stores that grew are the
//!   ones that give memory back. The newest batch always stays in memory.
//! - **Which rows**: the oldest batches go first. In a stream, old rows are the cold ones
//!   (a join's bids of long-closed auctions); rows read back are kept in a small cache.
//! - **Files**: spilled batches are appended to segment files that are unlinked as soon as
//!   they are created, so nothing is left behind when the process ends, however it ends.
//!   A segment's disk space is freed once every batch in it has been dropped (expired by
//!   the watermark or a state TTL). Blocks of checkpoint payloads an operator keeps on disk
//!   ([`SpillFile::keep`]) are in files of their own, freed with the last reference.
//!
//! Reads and writes are plain blocking file calls on the task's thread, as a RocksDB state
//! backend's are in Flink: local disk answers in microseconds to milliseconds.

use crate::checkpoint::DiskPayload;
use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use weir_common::{Error, Result};

/// A new segment file is started once the current one holds this much.
const SEGMENT_BYTES: u64 = 256 << 20;
/// Batches read back from disk kept decoded, at most this many bytes per store.
const CACHE_BYTES: usize = 32 << 20;

/// The memory budget of a job's keyed state, shared by its stores.
#[derive(Debug)]
pub struct StateMemory {
    pub(crate) budget: u64,
    pub(crate) dir: PathBuf,
    pub(crate) used: AtomicU64,
    pub(crate) stores: AtomicUsize,
}

impl StateMemory {
    /// A budget of `budget` bytes; spill files go under `dir`.
    pub fn new(budget: u64, dir: PathBuf) -> Arc<Self> {
        Arc::new(Self {
            budget,
            dir,
            used: AtomicU64::new(0),
            stores: AtomicUsize::new(0),
        })
    }

    /// Bytes the stores hold in memory now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Whether `bytes` more fit in the budget now.
    pub fn has_room(&self, bytes: u64) -> bool {
        self.used().saturating_add(bytes) <= self.budget
    }

    /// Whether a store holding `resident` bytes should give some back.
    pub(crate) fn over(&self, resident: u64) -> bool {
        self.used() > self.budget && resident > self.share()
    }

    /// A store's fair share of the budget: the budget divided by the stores.
    pub(crate) fn share(&self) -> u64 {
        self.budget / self.stores.load(Ordering::Relaxed).max(1) as u64
    }

    /// Says in the log, once per store, that a store started `doing` (what it moves to
    /// disk, and where).
    pub fn announce(&self, doing: &str) {
        tracing::info!(
            "keyed state is over its share of 'taskmanager.memory.managed.size' \
             ({} MiB for the job): {doing} to {}",
            self.budget >> 20,
            self.dir.display()
        );
    }

    pub(crate) fn create_file(&self) -> Result<File> {
        std::fs::create_dir_all(&self.dir)
            .and_then(|_| tempfile::tempfile_in(&self.dir))
            .map_err(|e| {
                Error::external(format!(
                    "cannot create a state spill file under 'io.tmp.dirs' ({}): {e}",
                    self.dir.display()
                ))
            })
    }
}

/// An append-only local file (unlinked: it goes when the last handle does).
#[derive(Debug)]
pub struct SpillFile {
    file: File,
    len: AtomicU64,
    /// What the file is, for messages.
    what: String,
}

impl SpillFile {
    /// A new file under the budget's folder.
    pub fn create(memory: &StateMemory) -> Result<Arc<Self>> {
        Ok(Arc::new(Self {
            file: memory.create_file()?,
            len: AtomicU64::new(0),
            what: format!(
                "a state spill file under 'io.tmp.dirs' ({})",
                memory.dir.display()
            ),
        }))
    }

    /// The file in `slot`, created there under the budget's folder on first use (one
    /// snapshot's encoded parts go to one file).
    pub fn in_slot(slot: &mut Option<Arc<Self>>, memory: &StateMemory) -> Result<Arc<Self>> {
        match slot {
            Some(file) => Ok(file.clone()),
            None => Ok(slot.insert(Self::create(memory)?).clone()),
        }
    }

    /// An existing file (a checkpoint's, on local disk), to read: its handle keeps it
    /// readable even once it is deleted.
    pub fn open(path: &std::path::Path) -> Result<Arc<Self>> {
        let what = format!("the state file '{}'", path.display());
        let file =
            File::open(path).map_err(|e| Error::external(format!("opening {what} failed: {e}")))?;
        let len = file
            .metadata()
            .map_err(|e| Error::external(format!("reading {what} failed: {e}")))?
            .len();
        Ok(Arc::new(Self {
            file,
            len: AtomicU64::new(len),
            what,
        }))
    }

    /// How many bytes it holds.
    pub fn len(&self) -> u64 {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `bytes`; returns where they start.
    pub fn append(&self, bytes: &[u8]) -> Result<u64> {
        let at = self.len.load(Ordering::Relaxed);
        (&self.file)
            .write_all(bytes)
            .map_err(|e| self.error("writing", e))?;
        self.len.store(at + bytes.len() as u64, Ordering::Relaxed);
        Ok(at)
    }

    /// The `len` bytes at `at`.
    pub fn read(&self, at: u64, len: u64) -> Result<Bytes> {
        let mut bytes = vec![0; len as usize];
        self.file
            .read_exact_at(&mut bytes, at)
            .map_err(|e| self.error("reading", e))?;
        Ok(Bytes::from(bytes))
    }

    fn error(&self, doing: &str, e: std::io::Error) -> Error {
        Error::external(format!("{doing} {} failed: {e}", self.what))
    }

    /// Appends checkpoint payloads (`(key groups, bytes)`) and returns them as
    /// [`DiskPayload`]s, named like the shared objects of incremental checkpoints: an
    /// operator keeps these instead of the bytes between checkpoints. The file stays
    /// while any of them does.
    pub fn keep<K>(self: &Arc<Self>, parts: Vec<(K, Bytes)>) -> Result<Vec<(K, DiskPayload)>> {
        parts
            .into_iter()
            .map(|(kg, bytes)| {
                let at = self.append(&bytes)?;
                let name = crate::checkpoint::shared_name(&bytes);
                Ok((kg, self.payload(name, at, bytes.len() as u64)))
            })
            .collect()
    }

    /// The `len` bytes at `at`, whose [`crate::checkpoint::shared_name`] is `name`, as a
    /// payload that keeps the file.
    pub fn payload(self: &Arc<Self>, name: String, at: u64, len: u64) -> DiskPayload {
        let file = self.clone();
        DiskPayload::new(name, len, Arc::new(move || file.read(at, len)))
    }

    /// The [`crate::checkpoint::shared_name`] of the `len` bytes at `at`, read a few
    /// megabytes at a time.
    pub fn name_of(&self, at: u64, len: u64) -> Result<String> {
        let mut hasher = twox_hash::XxHash3_128::new();
        self.scan(at, len, |chunk| hasher.write(chunk))?;
        Ok(crate::checkpoint::shared_name_of(hasher.finish_128()))
    }

    /// Hands the `len` bytes at `at` to `f`, a few megabytes at a time.
    pub fn scan(&self, at: u64, len: u64, mut f: impl FnMut(&[u8])) -> Result<()> {
        const CHUNK: u64 = 8 << 20;
        let mut done = 0;
        while done < len {
            let n = CHUNK.min(len - done);
            f(&self.read(at + done, n)?);
            done += n;
        }
        Ok(())
    }
}

/// Where a stored batch is.
enum Slot {
    Memory {
        batch: RecordBatch,
        bytes: u64,
    },
    Disk {
        segment: usize,
        at: u64,
        len: u64,
        rows: usize,
        /// Its [`crate::checkpoint::shared_name`], once a checkpoint asked for it.
        name: Option<String>,
    },
    Dropped,
}

struct Segment {
    file: Arc<SpillFile>,
    /// Batches in it not dropped yet; at zero the file goes.
    live: usize,
}

/// Batches read back from disk, newest last.
#[derive(Default)]
struct Cache {
    batches: VecDeque<(usize, RecordBatch)>,
    bytes: usize,
}

/// A sequence of batches addressed by position (what an operator's index points to), each
/// in memory or on local disk (see the module docs). Without a [`StateMemory`] everything
/// stays in memory.
pub struct BatchStore {
    schema: SchemaRef,
    slots: Vec<Slot>,
    memory: Option<Arc<StateMemory>>,
    /// Bytes of the batches in memory.
    resident: u64,
    /// Bytes the operator holds beside the batches for this store (its index), counted
    /// against the budget too; they cannot spill, so the batches give way for them.
    overhead: u64,
    /// Bytes of the batches on disk.
    on_disk: u64,
    /// Slots before this one are not in memory.
    oldest: usize,
    segments: Vec<Option<Segment>>,
    cache: Mutex<Cache>,
}

impl BatchStore {
    pub fn new(schema: SchemaRef, memory: Option<Arc<StateMemory>>) -> Self {
        if let Some(m) = &memory {
            m.stores.fetch_add(1, Ordering::Relaxed);
        }
        Self {
            schema,
            slots: Vec::new(),
            memory,
            resident: 0,
            overhead: 0,
            on_disk: 0,
            oldest: 0,
            segments: Vec::new(),
            cache: Mutex::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Bytes in memory, and on disk.
    pub fn bytes(&self) -> (u64, u64) {
        (self.resident, self.on_disk)
    }

    /// Whether any batch is on disk now.
    pub fn spilling(&self) -> bool {
        self.on_disk > 0
    }

    /// The budget this store answers to, if any.
    pub fn memory(&self) -> Option<&Arc<StateMemory>> {
        self.memory.as_ref()
    }

    /// Stores `batch` at the next position (returned), spilling older batches if the job's
    /// state is over its budget.
    pub fn push(&mut self, batch: RecordBatch) -> Result<usize> {
        let bytes = batch.get_array_memory_size() as u64;
        self.resident += bytes;
        if let Some(m) = &self.memory {
            m.used.fetch_add(bytes, Ordering::Relaxed);
        }
        self.slots.push(Slot::Memory { batch, bytes });
        self.relieve()?;
        Ok(self.slots.len() - 1)
    }

    /// Sets the bytes the operator holds beside the batches (see `overhead`); spills if
    /// that puts the job over budget.
    pub fn set_overhead(&mut self, bytes: u64) -> Result<()> {
        if let Some(m) = &self.memory {
            m.used.fetch_add(bytes, Ordering::Relaxed);
            m.used.fetch_sub(self.overhead, Ordering::Relaxed);
        }
        let grew = bytes > self.overhead;
        self.overhead = bytes;
        if grew { self.relieve() } else { Ok(()) }
    }

    /// Whether the job's state is over its budget with this store over its share (after
    /// [`Self::push`] or [`Self::set_overhead`] spilled what they could, only the
    /// operator's own memory, its overhead, can give way).
    pub fn over_budget(&self) -> bool {
        (self.memory.as_ref()).is_some_and(|m| m.over(self.resident + self.overhead))
    }

    /// Batch `b` as a checkpoint payload: the Arrow IPC stream [`Self::get`] reads. A
    /// batch on disk is handed where it lies (named once, the first time, by reading it),
    /// so an incremental checkpoint that holds it already refers to it without reading
    /// it; a batch in memory is encoded.
    pub fn payload(&mut self, b: usize) -> Result<DiskPayload> {
        match &mut self.slots[b] {
            Slot::Memory { batch, .. } => {
                Ok(DiskPayload::in_memory(crate::keyed::encode_batch(batch)?))
            }
            Slot::Disk {
                segment,
                at,
                len,
                name,
                ..
            } => {
                let s = self.segments[*segment].as_ref().expect("live segment");
                let name = match name {
                    Some(name) => name.clone(),
                    None => name.insert(s.file.name_of(*at, *len)?).clone(),
                };
                Ok(s.file.payload(name, *at, *len))
            }
            Slot::Dropped => Err(Error::internal("a dropped state batch has no payload")),
        }
    }

    /// Rows of batch `b` (0 once dropped).
    pub fn rows(&self, b: usize) -> usize {
        match &self.slots[b] {
            Slot::Memory { batch, .. } => batch.num_rows(),
            Slot::Disk { rows, .. } => *rows,
            Slot::Dropped => 0,
        }
    }

    pub fn is_on_disk(&self, b: usize) -> bool {
        matches!(self.slots[b], Slot::Disk { .. })
    }

    /// Batch `b` (empty once dropped), read back from disk if it is there.
    pub fn get(&self, b: usize) -> Result<RecordBatch> {
        let (segment, at, len) = match &self.slots[b] {
            Slot::Memory { batch, .. } => return Ok(batch.clone()),
            Slot::Dropped => return Ok(RecordBatch::new_empty(self.schema.clone())),
            Slot::Disk {
                segment, at, len, ..
            } => (*segment, *at, *len),
        };
        let mut cache = self.cache.lock().expect("not poisoned");
        if let Some((_, batch)) = cache.batches.iter().find(|(c, _)| *c == b) {
            return Ok(batch.clone());
        }
        let file = &self.segments[segment].as_ref().expect("live segment").file;
        let bytes = file.read(at, len)?;
        let mut reader =
            arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
        let batch = reader
            .next()
            .transpose()?
            .ok_or_else(|| Error::internal("a spilled state batch is empty"))?;
        let size = batch.get_array_memory_size();
        cache.bytes += size;
        cache.batches.push_back((b, batch.clone()));
        while cache.bytes > CACHE_BYTES && cache.batches.len() > 1 {
            let (_, old) = cache.batches.pop_front().expect("not empty");
            cache.bytes -= old.get_array_memory_size();
        }
        Ok(batch)
    }

    /// The rows `picks` (`(batch, row)`) of every column, in order; each batch involved is
    /// read once.
    pub fn gather(&self, picks: &[(usize, usize)]) -> Result<Vec<ArrayRef>> {
        let mut local: HashMap<usize, usize> = HashMap::new();
        let mut batches = Vec::new();
        let mut remapped = Vec::with_capacity(picks.len());
        for (b, i) in picks {
            let at = match local.get(b) {
                Some(at) => *at,
                None => {
                    batches.push(self.get(*b)?);
                    local.insert(*b, batches.len() - 1);
                    batches.len() - 1
                }
            };
            remapped.push((at, *i));
        }
        (0..self.schema.fields().len())
            .map(|c| {
                if batches.is_empty() {
                    return Ok(arrow::array::new_empty_array(
                        self.schema.field(c).data_type(),
                    ));
                }
                let arrays: Vec<&dyn Array> =
                    batches.iter().map(|b| b.column(c).as_ref()).collect();
                Ok(arrow::compute::interleave(&arrays, &remapped)?)
            })
            .collect()
    }

    /// Like [`Self::gather`], with NULL rows where `picks` has `None`.
    pub fn gather_or_null(&self, picks: &[Option<(usize, usize)>]) -> Result<Vec<ArrayRef>> {
        let found: Vec<(usize, usize)> = picks.iter().flatten().copied().collect();
        if found.is_empty() {
            return Ok(self
                .schema
                .fields()
                .iter()
                .map(|f| arrow::array::new_null_array(f.data_type(), picks.len()))
                .collect());
        }
        let columns = self.gather(&found)?;
        if found.len() == picks.len() {
            return Ok(columns);
        }
        let mut next = 0u32;
        let indices: UInt32Array = picks
            .iter()
            .map(|p| {
                p.map(|_| {
                    next += 1;
                    next - 1
                })
            })
            .collect();
        columns
            .iter()
            .map(|c| Ok(arrow::compute::take(c.as_ref(), &indices, None)?))
            .collect()
    }

    /// Drops batch `b` (its position stays, empty).
    pub fn drop_batch(&mut self, b: usize) {
        match std::mem::replace(&mut self.slots[b], Slot::Dropped) {
            Slot::Memory { bytes, .. } => self.forget(bytes),
            Slot::Disk { segment, len, .. } => {
                self.on_disk -= len;
                let s = self.segments[segment].as_mut().expect("live segment");
                s.live -= 1;
                if s.live == 0 && segment + 1 < self.segments.len() {
                    self.segments[segment] = None;
                }
                let mut cache = self.cache.lock().expect("not poisoned");
                if let Some(at) = cache.batches.iter().position(|(c, _)| *c == b) {
                    let (_, old) = cache.batches.remove(at).expect("found");
                    cache.bytes -= old.get_array_memory_size();
                }
            }
            Slot::Dropped => {}
        }
    }

    /// Drops every batch; positions start again at 0.
    pub fn clear(&mut self) {
        for b in 0..self.slots.len() {
            self.drop_batch(b);
        }
        self.slots.clear();
        self.segments.clear();
        self.oldest = 0;
    }

    fn forget(&mut self, bytes: u64) {
        self.resident -= bytes;
        if let Some(m) = &self.memory {
            m.used.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    /// Spills the oldest batches while the job's state is over budget.
    fn relieve(&mut self) -> Result<()> {
        let Some(memory) = self.memory.clone() else {
            return Ok(());
        };
        while memory.over(self.resident + self.overhead) && self.oldest + 1 < self.slots.len() {
            let b = self.oldest;
            self.oldest += 1;
            let Slot::Memory { batch, bytes } = &self.slots[b] else {
                continue;
            };
            let (bytes, rows) = (*bytes, batch.num_rows());
            let encoded = crate::keyed::encode_batch(batch)?;
            let segment = match self.segments.last() {
                Some(Some(s)) if s.file.len.load(Ordering::Relaxed) < SEGMENT_BYTES => {
                    self.segments.len() - 1
                }
                _ => {
                    if self.segments.is_empty() {
                        memory.announce("spilling the oldest rows");
                    }
                    self.segments.push(Some(Segment {
                        file: SpillFile::create(&memory)?,
                        live: 0,
                    }));
                    self.segments.len() - 1
                }
            };
            let s = self.segments[segment].as_mut().expect("just chosen");
            let at = s.file.append(&encoded)?;
            s.live += 1;
            let len = encoded.len() as u64;
            self.on_disk += len;
            self.slots[b] = Slot::Disk {
                segment,
                at,
                len,
                rows,
                name: None,
            };
            self.forget(bytes);
        }
        Ok(())
    }
}

impl Drop for BatchStore {
    fn drop(&mut self) {
        if let Some(m) = &self.memory {
            m.used
                .fetch_sub(self.resident + self.overhead, Ordering::Relaxed);
            m.stores.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    fn batch(schema: &SchemaRef, from: i64, n: i64) -> RecordBatch {
        let ids: Int64Array = (from..from + n).collect();
        let names: StringArray = (from..from + n).map(|i| Some(format!("row-{i}"))).collect();
        RecordBatch::try_new(schema.clone(), vec![Arc::new(ids), Arc::new(names)]).unwrap()
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]))
    }

    /// Over budget, old batches go to disk and come back equal; the newest stays.
    #[test]
    fn batches_over_the_budget_spill_and_read_back_equal() {
        let tmp = tempfile::tempdir().unwrap();
        let memory = StateMemory::new(64 << 10, tmp.path().to_path_buf());
        let schema = schema();
        let mut store = BatchStore::new(schema.clone(), Some(memory.clone()));
        let written: Vec<RecordBatch> = (0..40).map(|k| batch(&schema, k * 1000, 1000)).collect();
        for b in &written {
            store.push(b.clone()).unwrap();
        }
        assert!(store.spilling());
        assert!(memory.used() <= (64 << 10) + written[0].get_array_memory_size() as u64);
        assert!(!store.is_on_disk(39));
        for (b, expected) in written.iter().enumerate() {
            assert_eq!(&store.get(b).unwrap(), expected, "batch {b}");
            assert_eq!(store.rows(b), 1000);
        }
        let picks = [(0, 5), (39, 1), (0, 7), (12, 999)];
        let columns = store.gather(&picks).unwrap();
        let ids = columns[0].as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(ids.values(), &[5, 39_001, 7, 12_999]);
        let padded = store.gather_or_null(&[None, Some((3, 2)), None]).unwrap();
        let ids = padded[0].as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(ids.iter().collect::<Vec<_>>(), [None, Some(3002), None]);
        let nulls = store.gather_or_null(&[None, None]).unwrap();
        assert_eq!((nulls[1].len(), nulls[1].null_count()), (2, 2));
        // Dropping everything gives the memory and the files back.
        store.clear();
        assert_eq!(memory.used(), 0);
        assert_eq!(store.bytes(), (0, 0));
    }

    #[test]
    fn without_a_budget_nothing_spills() {
        let schema = schema();
        let mut store = BatchStore::new(schema.clone(), None);
        for k in 0..10 {
            store.push(batch(&schema, k * 1000, 1000)).unwrap();
        }
        assert!(!store.spilling());
        store.drop_batch(3);
        assert_eq!(store.rows(3), 0);
        assert_eq!(store.get(3).unwrap().num_rows(), 0);
    }

    /// Payloads kept on disk read back whole, under their content's name.
    #[test]
    fn kept_payloads_read_back_under_their_names() {
        let tmp = tempfile::tempdir().unwrap();
        let memory = StateMemory::new(1 << 20, tmp.path().to_path_buf());
        let parts = vec![(3, Bytes::from(vec![7u8; 5000])), (9, Bytes::from("small"))];
        let kept = SpillFile::create(&memory)
            .unwrap()
            .keep(parts.clone())
            .unwrap();
        for ((kg, bytes), (kept_kg, payload)) in parts.iter().zip(&kept) {
            assert_eq!(kg, kept_kg);
            assert_eq!(&payload.read().unwrap(), bytes);
            assert_eq!(payload.name, crate::checkpoint::shared_name(bytes));
            assert_eq!(payload.size, bytes.len() as u64);
        }
    }
}
