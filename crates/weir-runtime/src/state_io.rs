//! Reading and writing task state files (see [`crate::state_file`]) without holding
//! them whole in memory.
//!
//! **Writing.** A state file of at least [`STREAM_MIN_BYTES`] (a non-incremental
//! checkpoint or a savepoint of large state) is uploaded in parts as its pieces are
//! produced: payloads an operator keeps on disk are read one at a time, and a savepoint
//! fetches the shared objects it inlines one at a time.
//!
//! **Reading.** A job whose state is larger than memory (see [`weir_state::spill`]) must
//! also restore without holding it. Given the job's [`StateMemory`], a restore keeps every
//! shared object, and every state file of at least [`LOCAL_MIN_BYTES`] (savepoints and
//! non-incremental checkpoints hold their payloads inline), on local disk: read in place
//! from a checkpoint folder on local disk (an open handle keeps a file readable after the
//! job deletes it), else streamed into unlinked files under `io.tmp.dirs`. Each is
//! checked against its name or recorded checksum, a few megabytes at a time, before the
//! job starts, and operators get payloads that read from there
//! ([`weir_state::checkpoint::DiskPayload`]). An operator that spills (a join side) then
//! reads one payload at a time; the copies go once the restored states are dropped.

use crate::checkpoint::{Digester, FileDigest, TaskSnapshot};
use crate::state_file::{
    PREFIX_LEN, PayloadAt, SharedRef, StateLayout, check_shared, decode_layout, decode_task_state,
    encode_head, fill_shared, header_len, place_payloads, shared_name,
};
use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use std::sync::Arc;
use weir_common::{Error, Result};
use weir_state::spill::{SpillFile, StateMemory};

/// State files at least this large are written in parts.
pub const STREAM_MIN_BYTES: u64 = 16 << 20;

/// The size of those parts (S3 wants at least 5 MiB but for the last).
const PART_BYTES: usize = 8 << 20;

/// Parts uploaded at once.
const PARTS_IN_FLIGHT: usize = 4;

/// State files at least this large are read onto local disk when a restore has a place
/// for them; smaller ones are read into memory.
pub const LOCAL_MIN_BYTES: u64 = 4 << 20;

/// Where a restore keeps what it reads: the job's state budget, whose folder takes
/// copies, and the checkpoint's folder when it is on local disk (its files are then read
/// in place, not copied).
#[derive(Clone, Copy)]
pub struct Local<'a> {
    pub memory: &'a StateMemory,
    pub folder: Option<&'a std::path::Path>,
}

/// Reads the state file at `path` (`file` in the checkpoint's folder), which the
/// checkpoint recorded as `expected`, and the shared objects under `shared_root` it refers
/// to; payloads stay on local disk when `local` is given (see the module docs).
/// `corrupt` words what is wrong with the file.
pub async fn read_task_state(
    store: &Arc<dyn ObjectStore>,
    (path, file): (&Path, &str),
    expected: &FileDigest,
    shared_root: &Path,
    local: Option<Local<'_>>,
    corrupt: impl Fn(String) -> Error,
) -> Result<TaskSnapshot> {
    let mismatch = |actual: &FileDigest| {
        corrupt(format!(
            "{} bytes with checksum {}, the checkpoint recorded {} bytes with checksum {}",
            actual.size, actual.xxh64, expected.size, expected.xxh64
        ))
    };
    let not_corrupt = |e: Error| match e {
        e @ Error::CorruptCheckpoint(_) => e,
        e => corrupt(e.to_string()),
    };
    let (mut snapshot, refs) = match local.filter(|_| expected.size >= LOCAL_MIN_BYTES) {
        Some(local) => {
            let on_disk = local.folder.map(|f| f.join(file));
            let (copy, actual) = local_copy(store, path, on_disk, local.memory, |copy| {
                let mut digester = Digester::default();
                copy.scan(0, copy.len(), |chunk| digester.write(chunk))?;
                Ok(digester.finish())
            })
            .await?;
            if actual != *expected {
                return Err(mismatch(&actual));
            }
            decode_on_disk(&copy, actual.size).map_err(not_corrupt)?
        }
        None => {
            let bytes = get(store, path).await?.bytes().await?;
            let actual = FileDigest::of([bytes.as_ref()]);
            if actual != *expected {
                return Err(mismatch(&actual));
            }
            decode_task_state(bytes).map_err(not_corrupt)?
        }
    };
    fetch_shared(store, shared_root, &mut snapshot, refs, local)
        .await
        .map_err(not_corrupt)?;
    Ok(snapshot)
}

/// The object at `path` as a local file, with `hash` of it: the file at `on_disk` itself
/// when the object is one, else a copy streamed under `memory`'s folder.
async fn local_copy<H>(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    on_disk: Option<std::path::PathBuf>,
    memory: &StateMemory,
    hash: impl Fn(&SpillFile) -> Result<H>,
) -> Result<(Arc<SpillFile>, H)> {
    if let Some(on_disk) = on_disk {
        let file = open_local(&on_disk)?;
        let hashed = hash(&file)?;
        return Ok((file, hashed));
    }
    let file = SpillFile::create(memory)?;
    let mut stream = get(store, path).await?.into_stream();
    while let Some(chunk) = stream.next().await {
        file.append(&chunk?)?;
    }
    let hashed = hash(&file)?;
    Ok((file, hashed))
}

async fn get(store: &Arc<dyn ObjectStore>, path: &Path) -> Result<object_store::GetResult> {
    store.get(path).await.map_err(|e| missing(e, path))
}

/// Decodes a state file kept in `file` (`len` bytes): its inline payloads stay there.
fn decode_on_disk(file: &Arc<SpillFile>, len: u64) -> Result<(TaskSnapshot, Vec<SharedRef>)> {
    let head = header_len(&file.read(0, (PREFIX_LEN as u64).min(len))?)?;
    if head as u64 > len {
        return Err(Error::Checkpoint(
            "not a Weir task state file: truncated header".into(),
        ));
    }
    let layout = decode_layout(&file.read(0, head as u64)?)?;
    place_payloads(layout, len, |state, p, at| {
        let size = at.end - at.start;
        let payload = file.payload(file.name_of(at.start, size)?, at.start, size);
        state.set_disk_payload(p, payload);
        Ok(())
    })
}

/// Fetches the shared objects `refs` of `snapshot` from `shared_root`, each checked
/// against its name: kept on local disk when `local` is given, else read into memory.
async fn fetch_shared(
    store: &Arc<dyn ObjectStore>,
    shared_root: &Path,
    snapshot: &mut TaskSnapshot,
    refs: Vec<SharedRef>,
    local: Option<Local<'_>>,
) -> Result<()> {
    // Objects on local disk, each opened once for all the payloads read from it.
    let mut opened: std::collections::HashMap<String, Arc<SpillFile>> = Default::default();
    for r in refs {
        let path = shared_root.clone().join(r.at.object.as_str());
        let Some(local) = local else {
            let bytes = get_range(store, &path, r.range()).await?;
            fill_shared(snapshot, &r, bytes)?;
            continue;
        };
        let on_disk = local
            .folder
            .and_then(|f| f.parent())
            .map(|job| job.join("shared").join(&r.at.object));
        let (file, at, size) = match on_disk {
            Some(on_disk) => {
                let file = match opened.get(&r.at.object) {
                    Some(file) => file.clone(),
                    None => {
                        let file = open_local(&on_disk)?;
                        opened.insert(r.at.object.clone(), file.clone());
                        file
                    }
                };
                if r.range().end > file.len() {
                    return Err(Error::CorruptCheckpoint(format!(
                        "shared state object '{}' ends before the state at {} of {} bytes",
                        on_disk.display(),
                        r.at.offset,
                        r.size
                    )));
                }
                (file, r.at.offset, r.size)
            }
            None => {
                let file = SpillFile::create(local.memory)?;
                let mut stream = store
                    .get_opts(
                        &path,
                        object_store::GetOptions {
                            range: Some(r.range().into()),
                            ..Default::default()
                        },
                    )
                    .await
                    .map_err(|e| missing(e, &path))?
                    .into_stream();
                while let Some(chunk) = stream.next().await {
                    file.append(&chunk?)?;
                }
                let got = file.len();
                (file, 0, got)
            }
        };
        check_shared(&r, size, &file.name_of(at, size)?)?;
        snapshot
            .state_mut(r.state)
            .set_disk_payload(r.payload, file.payload(r.at.name.clone(), at, r.size));
    }
    Ok(())
}

/// Opens a state object kept on local disk.
fn open_local(on_disk: &std::path::Path) -> Result<Arc<SpillFile>> {
    if !on_disk.is_file() {
        return Err(Error::CorruptCheckpoint(format!(
            "state object '{}' is missing",
            on_disk.display()
        )));
    }
    SpillFile::open(on_disk)
}

/// Bytes `range` of the object at `path`.
async fn get_range(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    range: std::ops::Range<u64>,
) -> Result<Bytes> {
    store
        .get_range(path, range)
        .await
        .map_err(|e| missing(e, path))
}

fn missing(e: object_store::Error, path: &Path) -> Error {
    match e {
        object_store::Error::NotFound { .. } => {
            Error::CorruptCheckpoint(format!("state object '{path}' is missing"))
        }
        e => e.into(),
    }
}

/// Writes the object at `path` from `pieces` (`total` bytes in all): one put when small,
/// else a multipart upload as the pieces come, which becomes visible only once complete.
/// Returns the object's digest.
pub async fn put_pieces<S>(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    total: u64,
    pieces: S,
) -> Result<FileDigest>
where
    S: futures::Stream<Item = Result<Bytes>>,
{
    let mut pieces = std::pin::pin!(pieces);
    let mut digester = Digester::default();
    if total < STREAM_MIN_BYTES {
        let mut all = Vec::new();
        while let Some(piece) = pieces.next().await {
            let piece = piece?;
            digester.write(&piece);
            all.push(piece);
        }
        store.put(path, all.into_iter().collect()).await?;
        return Ok(digester.finish());
    }
    let upload = store.put_multipart(path).await?;
    let mut upload = object_store::WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
    let written = async {
        while let Some(piece) = pieces.next().await {
            let piece = piece?;
            digester.write(&piece);
            upload.wait_for_capacity(PARTS_IN_FLIGHT).await?;
            upload.put(piece);
        }
        Ok::<_, Error>(())
    }
    .await;
    match written {
        Ok(()) => {
            upload.finish().await?;
            Ok(digester.finish())
        }
        Err(e) => {
            let _ = upload.abort().await;
            Err(e)
        }
    }
}

/// Writes the state file `bytes` (read from a checkpoint whose shared objects are under
/// `shared_root`) to `path` with every payload inline, fetching the shared objects one
/// at a time. Returns its digest.
pub async fn write_inlined(
    store: &Arc<dyn ObjectStore>,
    shared_root: &Path,
    bytes: Bytes,
    target: &Arc<dyn ObjectStore>,
    path: &Path,
) -> Result<FileDigest> {
    let head = bytes
        .get(..header_len(&bytes)?.min(bytes.len()))
        .unwrap_or(&bytes);
    let StateLayout { snapshot, places } = decode_layout(head)?;
    let states = snapshot.source.is_some() as usize + snapshot.operators.len();
    let mut sizes = vec![Vec::new(); states];
    for place in &places {
        sizes[place.state].push(place.size);
    }
    let head = encode_head(&snapshot, sizes, &[])?;
    let total = head.len() as u64 + places.iter().map(|p| p.size).sum::<u64>();
    let payloads = futures::stream::iter(places).then(|place| {
        let bytes = bytes.clone();
        async move {
            match place.at {
                PayloadAt::Inline { offset } => {
                    let end = offset + place.size;
                    if end > bytes.len() as u64 {
                        return Err(Error::Checkpoint(
                            "not a Weir task state file: truncated payload".into(),
                        ));
                    }
                    Ok(bytes.slice(offset as usize..end as usize))
                }
                PayloadAt::Shared(at) => {
                    let path = shared_root.clone().join(at.object.as_str());
                    let r = SharedRef {
                        state: place.state,
                        payload: place.payload,
                        at,
                        size: place.size,
                    };
                    let got = get_range(store, &path, r.range()).await?;
                    check_shared(&r, got.len() as u64, &shared_name(&got))?;
                    Ok(got)
                }
            }
        }
    });
    let pieces = futures::stream::iter([Ok(head)]).chain(payloads);
    put_pieces(target, path, total, pieces).await
}
