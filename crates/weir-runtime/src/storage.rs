//! Checkpoint storage on `object_store`.
//!
//! Layout: `<dir>/<job-id>/chk-<N>/<task>.json` for task state and
//! `<dir>/<job-id>/chk-<N>/_metadata`, written last. Object stores write whole objects
//! atomically (the local file system writes a staging file and renames it), so a
//! checkpoint either has a complete `_metadata` or does not exist.

use crate::checkpoint::{CheckpointMetadata, FileDigest, SubtaskEntry, TaskSnapshot};
use futures::TryStreamExt;
use object_store::multipart::MultipartStore;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::sync::Arc;
use weir_common::{CheckpointId, Error, JobId, Result};

/// A resolved location: the store, the path inside it, and the store's multipart-upload
/// interface where it has one (S3 and friends).
#[derive(Clone)]
pub struct Location {
    pub store: Arc<dyn ObjectStore>,
    pub path: Path,
    pub multipart: Option<Arc<dyn MultipartStore>>,
    /// The folder on disk, for a local location.
    pub local: Option<std::path::PathBuf>,
    /// Lists uploads in progress (S3).
    pub uploads: Option<Arc<crate::s3_uploads::UploadLister>>,
}

/// S3 settings given as table options rather than environment variables.
#[derive(Debug, Clone, Default)]
pub struct S3Settings {
    pub access_key: Option<String>,
    pub secret_key: Option<String>,
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// How long a failing request is retried before the error reaches the job (`s3.retry.timeout`);
    /// default [`DEFAULT_S3_RETRY_TIMEOUT`].
    pub retry_timeout: Option<std::time::Duration>,
}

/// How long object-store requests are retried by default: long enough to ride out a short
/// outage (a count of retries would elapse in a couple of seconds: backoff starts at
/// 100 ms), short enough that a lasting one fails the job.
pub const DEFAULT_S3_RETRY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Turns a location (a local path or a URL: `file://`, `s3://`, `memory://`) into a store
/// and a path within it. S3 settings come from the usual `AWS_*` environment variables
/// (`AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
/// `AWS_ALLOW_HTTP`). Failing requests are retried with exponential backoff (100 ms to
/// 5 s between tries) for a time budget, not a count ([`S3Settings::retry_timeout`]).
///
/// A local folder is created if missing (checkpoints and sinks write there).
pub fn resolve_location(location: &str) -> Result<(Arc<dyn ObjectStore>, Path)> {
    resolve(location, true, &S3Settings::default()).map(|l| (l.store, l.path))
}

/// Like [`resolve_location`] for data to read: a local path must exist.
pub fn resolve_existing_location(location: &str) -> Result<(Arc<dyn ObjectStore>, Path)> {
    resolve(location, false, &S3Settings::default()).map(|l| (l.store, l.path))
}

/// Like [`resolve_location`], with S3 settings and the multipart interface.
pub fn resolve(location: &str, create: bool, s3: &S3Settings) -> Result<Location> {
    if let Some((scheme, _)) = location.split_once("://") {
        let url = url::Url::parse(location)
            .map_err(|e| Error::config(format!("invalid URL '{location}': {e}")))?;
        let path = Path::from(url.path().trim_start_matches('/'));
        return match scheme {
            "file" => {
                let p = url
                    .to_file_path()
                    .map_err(|_| Error::config(format!("invalid file URL '{location}'")))?;
                resolve(&p.to_string_lossy(), create, s3)
            }
            "s3" | "s3a" => {
                let mut builder = object_store::aws::AmazonS3Builder::from_env().with_url(location);
                if let Some(v) = &s3.access_key {
                    builder = builder.with_access_key_id(v);
                }
                if let Some(v) = &s3.secret_key {
                    builder = builder.with_secret_access_key(v);
                }
                if let Some(v) = &s3.endpoint {
                    builder = builder
                        .with_endpoint(v)
                        .with_allow_http(v.starts_with("http://"));
                }
                if let Some(v) = &s3.region {
                    builder = builder.with_region(v);
                }
                let mut retry = object_store::RetryConfig {
                    max_retries: usize::MAX,
                    retry_timeout: s3.retry_timeout.unwrap_or(DEFAULT_S3_RETRY_TIMEOUT),
                    ..Default::default()
                };
                retry.backoff.max_backoff = std::time::Duration::from_secs(5);
                builder = builder.with_retry(retry);
                let built = builder
                    .clone()
                    .build()
                    .map_err(|e| Error::config(format!("cannot use '{location}': {e}")))?;
                let bucket = url.host_str().unwrap_or_default();
                let uploads =
                    crate::s3_uploads::UploadLister::new(&builder, built.clone(), bucket)?;
                let store = Arc::new(built);
                Ok(Location {
                    store: store.clone(),
                    path,
                    multipart: Some(store),
                    local: None,
                    uploads: Some(Arc::new(uploads)),
                })
            }
            "memory" => {
                let store = memory_store();
                Ok(Location {
                    store: store.clone(),
                    path,
                    multipart: Some(store),
                    local: None,
                    uploads: None,
                })
            }
            other => Err(Error::config(format!(
                "unsupported storage scheme '{other}://' in '{location}'; supported: a local path, file://, s3://, memory://"
            ))),
        };
    }
    let path = std::path::Path::new(location);
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    if create {
        std::fs::create_dir_all(&abs).map_err(|e| {
            Error::external(format!("cannot create folder '{}': {e}", abs.display()))
        })?;
    } else if !abs.exists() {
        return Err(Error::input(format!(
            "path '{}' does not exist",
            abs.display()
        )));
    }
    let abs = abs.canonicalize()?;
    let store = object_store::local::LocalFileSystem::new();
    let p = Path::from_filesystem_path(&abs)
        .map_err(|e| Error::config(format!("invalid path '{location}': {e}")))?;
    Ok(Location {
        store: Arc::new(store),
        path: p,
        multipart: None,
        local: Some(abs),
        uploads: None,
    })
}

/// One in-memory store per process, so that `memory://` locations are shared by a job
/// and its restore within one process.
fn memory_store() -> Arc<object_store::memory::InMemory> {
    static STORE: std::sync::OnceLock<Arc<object_store::memory::InMemory>> =
        std::sync::OnceLock::new();
    STORE
        .get_or_init(|| Arc::new(object_store::memory::InMemory::new()))
        .clone()
}

/// Reads and writes the checkpoints of one job.
#[derive(Debug, Clone)]
pub struct CheckpointStorage {
    store: Arc<dyn ObjectStore>,
    job_root: Path,
    /// The job's folder on disk, when checkpoints are local.
    local_root: Option<std::path::PathBuf>,
}

impl CheckpointStorage {
    pub fn new(store: Arc<dyn ObjectStore>, base: &Path, job_id: JobId) -> Self {
        Self {
            store,
            job_root: base.clone().join(job_id.to_string()),
            local_root: None,
        }
    }

    /// Checkpoints under `location` (a local path, `file://`, `s3://` or `memory://`).
    pub fn at(location: &str, job_id: JobId) -> Result<Self> {
        let l = resolve(location, true, &S3Settings::default())?;
        let mut storage = Self::new(l.store, &l.path, job_id);
        storage.local_root = l.local.map(|d| d.join(job_id.to_string()));
        Ok(storage)
    }

    /// Where checkpoint `id` lives.
    pub fn checkpoint_path(&self, id: CheckpointId) -> Path {
        self.job_root.clone().join(format!("chk-{}", id.0))
    }

    pub fn describe(&self, id: CheckpointId) -> String {
        self.checkpoint_path(id).to_string()
    }

    /// Writes a task's state file (see [`encode_task_state`]) and returns its digest.
    pub async fn write_task_state(
        &self,
        id: CheckpointId,
        file: &str,
        snapshot: &TaskSnapshot,
    ) -> Result<FileDigest> {
        let payload = encode_task_state(snapshot)?;
        let digest = FileDigest::of(payload.iter().map(|b| b.as_ref()));
        self.store
            .put(&self.checkpoint_path(id).join(file), payload)
            .await?;
        Ok(digest)
    }

    /// Writes `_metadata` (sealed with its checksum), which makes the checkpoint exist.
    pub async fn write_metadata(&self, meta: &CheckpointMetadata) -> Result<()> {
        let mut meta = meta.clone();
        meta.seal()?;
        let bytes = serde_json::to_vec_pretty(&meta)?;
        let path = self.checkpoint_path(meta.checkpoint_id).join("_metadata");
        self.store.put(&path, PutPayload::from(bytes)).await?;
        Ok(())
    }

    /// Writes a self-contained copy of checkpoint `meta` (state files, then `_metadata`)
    /// as `<dir>/savepoint-<job>-<id>` and returns that location.
    pub async fn copy_to_savepoint(&self, meta: &CheckpointMetadata, dir: &str) -> Result<String> {
        let (store, base) = resolve_location(dir)?;
        let name = format!(
            "savepoint-{}-{}",
            &meta.job_id[..8.min(meta.job_id.len())],
            meta.checkpoint_id.0
        );
        let target = base.join(name.as_str());
        let source = self.checkpoint_path(meta.checkpoint_id);
        for v in &meta.vertices {
            for s in &v.subtasks {
                if let Some(file) = &s.state_file {
                    let bytes = self
                        .store
                        .get(&source.clone().join(file.as_str()))
                        .await?
                        .bytes()
                        .await?;
                    store
                        .put(&target.clone().join(file.as_str()), PutPayload::from(bytes))
                        .await?;
                }
            }
        }
        let mut meta = meta.clone();
        meta.seal()?;
        let bytes = serde_json::to_vec_pretty(&meta)?;
        store
            .put(&target.join("_metadata"), PutPayload::from(bytes))
            .await?;
        Ok(format!("{}/{name}", dir.trim_end_matches('/')))
    }

    /// Deletes everything of checkpoint `id`. `completed`: every task has written its
    /// state, so on a local disk the folder goes too; an aborted checkpoint may still be
    /// written to by a late task, whose write must not fail.
    pub async fn discard(&self, id: CheckpointId, completed: bool) -> Result<()> {
        let prefix = self.checkpoint_path(id);
        // Delete _metadata first so a half-deleted checkpoint is never taken for a whole one.
        let _ = self.store.delete(&prefix.clone().join("_metadata")).await;
        let objects: Vec<_> = self.store.list(Some(&prefix)).try_collect().await?;
        for o in objects {
            let _ = self.store.delete(&o.location).await;
        }
        // On disk, also the folder and what the store does not list: staging files of
        // writes a crash interrupted.
        if let (Some(root), true) = (&self.local_root, completed) {
            let _ = std::fs::remove_dir_all(root.join(format!("chk-{}", id.0)));
        }
        Ok(())
    }
}

/// How a location reads in messages: a local path as the absolute path on disk, a URL as
/// given (an object-store path alone drops the leading `/` and the bucket).
pub fn display_location(location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    let path = std::path::Path::new(location);
    match std::env::current_dir() {
        Ok(cwd) if path.is_relative() => cwd.join(path).display().to_string(),
        _ => path.display().to_string(),
    }
}

/// A completed checkpoint or savepoint, opened for restore.
#[derive(Debug, Clone)]
pub struct RestoredCheckpoint {
    pub store: Arc<dyn ObjectStore>,
    pub path: Path,
    /// Where it is, for messages (see [`display_location`]).
    pub location: String,
    pub metadata: CheckpointMetadata,
}

impl RestoredCheckpoint {
    /// Opens the checkpoint at `location` (its folder or its `_metadata` file). Nothing is
    /// created: a location that does not exist, or a local file that is not `_metadata`,
    /// is an error that says so.
    pub async fn open(location: &str) -> Result<Self> {
        let folder = location.trim_end_matches('/');
        let folder = folder.strip_suffix("/_metadata").unwrap_or(folder);
        let shown = display_location(folder);
        if !folder.contains("://") {
            match std::fs::metadata(folder) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(Error::input(format!(
                        "cannot restore from '{shown}': it is a file, not a checkpoint folder \
                         (give the folder that holds _metadata)"
                    )));
                }
                Err(e) => {
                    return Err(Error::input(format!("cannot restore from '{shown}': {e}")));
                }
            }
        }
        let (store, path) = resolve_existing_location(folder)?;
        Self::open_at(store, path, shown.clone())
            .await?
            .ok_or_else(|| {
                Error::Checkpoint(format!(
                    "'{shown}' is not a completed checkpoint: it has no _metadata"
                ))
            })
    }

    /// The checkpoint at `path`; `None` if it has no `_metadata` (not completed). A
    /// `_metadata` that does not parse or whose checksum does not match is
    /// [`Error::CorruptCheckpoint`].
    async fn open_at(
        store: Arc<dyn ObjectStore>,
        path: Path,
        location: String,
    ) -> Result<Option<Self>> {
        let meta_path = path.clone().join("_metadata");
        let bytes = match store.get(&meta_path).await {
            Ok(r) => r.bytes().await?,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let corrupt = |why: String| {
            Error::CorruptCheckpoint(format!("'{location}/_metadata' is corrupt: {why}"))
        };
        let version = serde_json::from_slice::<serde_json::Value>(&bytes)
            .map_err(|e| corrupt(e.to_string()))?
            .get("format_version")
            .and_then(|v| v.as_u64());
        if version != Some(crate::checkpoint::FORMAT_VERSION as u64) {
            return Err(Error::Checkpoint(format!(
                "checkpoint '{location}' has format version {}, this Weir reads version {}; \
                 restore it with the Weir that wrote it, or start without --restore",
                version.map_or("(none)".to_string(), |v| v.to_string()),
                crate::checkpoint::FORMAT_VERSION
            )));
        }
        let metadata: CheckpointMetadata =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        metadata.verify().map_err(corrupt)?;
        Ok(Some(Self {
            store,
            path,
            location,
            metadata,
        }))
    }

    /// Every completed checkpoint or savepoint of any job under `dir`, newest first. A
    /// checkpoint whose `_metadata` is corrupt is an `Err` in its place (ordered by when
    /// its `_metadata` was written), so that a restore can say so and fall back.
    pub async fn all_latest_first(dir: &str) -> Result<Vec<Result<Self>>> {
        let (store, base) = resolve_location(dir)?;
        let shown = display_location(dir);
        let mut found: Vec<((u64, u64), Result<Self>)> = Vec::new();
        let jobs = store.list_with_delimiter(Some(&base)).await?;
        for job in jobs.common_prefixes {
            let checkpoints = store.list_with_delimiter(Some(&job)).await?;
            for chk in checkpoints.common_prefixes {
                let Some(id) = chk
                    .filename()
                    .and_then(|f| f.strip_prefix("chk-"))
                    .and_then(|n| n.parse::<u64>().ok())
                else {
                    continue;
                };
                let relative = chk.as_ref().strip_prefix(base.as_ref()).unwrap_or_default();
                let location = format!(
                    "{}/{}",
                    shown.trim_end_matches('/'),
                    relative.trim_start_matches('/')
                );
                match Self::open_at(store.clone(), chk.clone(), location).await {
                    Ok(None) => {}
                    Ok(Some(c)) => found.push(((c.metadata.completed_at_ms, id), Ok(c))),
                    Err(e @ Error::CorruptCheckpoint(_)) => {
                        let written = store
                            .head(&chk.clone().join("_metadata"))
                            .await
                            .map(|m| m.last_modified.timestamp_millis().max(0) as u64)
                            .unwrap_or(0);
                        found.push(((written, id), Err(e)));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        found.sort_by_key(|(key, _)| std::cmp::Reverse(*key));
        Ok(found.into_iter().map(|(_, c)| c).collect())
    }

    /// The most recently completed checkpoint or savepoint of any job under `dir` whose
    /// `_metadata` is sound.
    pub async fn latest(dir: &str) -> Result<Option<Self>> {
        Ok(Self::all_latest_first(dir)
            .await?
            .into_iter()
            .find_map(|c| c.ok()))
    }

    /// Reads the state file of `entry`, checking its size and checksum.
    pub async fn read_task_state(&self, entry: &SubtaskEntry) -> Result<Option<TaskSnapshot>> {
        let Some(file) = &entry.state_file else {
            return Ok(None);
        };
        let bytes = self
            .store
            .get(&self.path.clone().join(file.as_str()))
            .await?
            .bytes()
            .await?;
        let corrupt = |why: String| {
            Error::CorruptCheckpoint(format!("'{}/{file}' is corrupt: {why}", self.location))
        };
        match &entry.state_digest {
            Some(expected) => {
                let actual = FileDigest::of([bytes.as_ref()]);
                if actual != *expected {
                    return Err(corrupt(format!(
                        "{} bytes with checksum {}, the checkpoint recorded {} bytes with checksum {}",
                        actual.size, actual.xxh64, expected.size, expected.xxh64
                    )));
                }
            }
            None => return Err(corrupt("the checkpoint recorded no checksum for it".into())),
        }
        decode_task_state(bytes)
            .map(Some)
            .map_err(|e| corrupt(e.to_string()))
    }
}

/// First bytes of a task state file.
const STATE_MAGIC: &[u8] = b"WEIR-TASK-STATE-2\n";

/// The JSON part of a task state file: the snapshot without payloads, and the sizes of the
/// payloads of each state (source first, if any, then the operators) that follow it.
#[derive(serde::Serialize)]
struct HeaderRef<'a> {
    snapshot: &'a TaskSnapshot,
    payloads: Vec<Vec<u64>>,
}

#[derive(serde::Deserialize)]
struct Header {
    snapshot: TaskSnapshot,
    payloads: Vec<Vec<u64>>,
}

/// A task state file: magic, the JSON header's length (u64, little endian), the JSON
/// header, then every payload's raw bytes in order — no base64, no escaping, written
/// from the payloads' own buffers.
pub fn encode_task_state(snapshot: &TaskSnapshot) -> Result<PutPayload> {
    let states = snapshot.source.iter().chain(&snapshot.operators);
    let header = serde_json::to_vec(&HeaderRef {
        snapshot,
        payloads: states
            .clone()
            .map(|s| s.payloads.iter().map(|p| p.len() as u64).collect())
            .collect(),
    })?;
    let mut head = Vec::with_capacity(STATE_MAGIC.len() + 8 + header.len());
    head.extend_from_slice(STATE_MAGIC);
    head.extend_from_slice(&(header.len() as u64).to_le_bytes());
    head.extend_from_slice(&header);
    Ok(std::iter::once(bytes::Bytes::from(head))
        .chain(states.flat_map(|s| s.payloads.iter().cloned()))
        .collect())
}

/// Reads a file written by [`encode_task_state`]; payloads are slices of `bytes`.
pub fn decode_task_state(bytes: bytes::Bytes) -> Result<TaskSnapshot> {
    let corrupt = |what: &str| Error::Checkpoint(format!("not a Weir task state file: {what}"));
    if !bytes.starts_with(STATE_MAGIC) {
        return Err(corrupt("unknown format (written by an older Weir?)"));
    }
    let mut at = STATE_MAGIC.len();
    let len = bytes
        .get(at..at + 8)
        .ok_or_else(|| corrupt("truncated header"))?;
    let len = u64::from_le_bytes(len.try_into().expect("8 bytes")) as usize;
    at += 8;
    let header = bytes
        .get(at..at.saturating_add(len))
        .ok_or_else(|| corrupt("truncated header"))?;
    let Header {
        mut snapshot,
        payloads,
    } = serde_json::from_slice(header)?;
    at += len;
    let states = snapshot.source.iter_mut().chain(&mut snapshot.operators);
    for (state, sizes) in states.zip(payloads) {
        for size in sizes {
            let end = at
                .checked_add(size as usize)
                .filter(|end| *end <= bytes.len())
                .ok_or_else(|| corrupt("truncated payload"))?;
            state.payloads.push(bytes.slice(at..end));
            at = end;
        }
    }
    Ok(snapshot)
}

#[cfg(test)]
mod state_file_tests {
    use super::*;
    use crate::checkpoint::{OperatorState, StateDistribution};

    #[test]
    fn task_state_round_trips_with_payloads_and_rejects_truncation() {
        let mut op = OperatorState::new(StateDistribution::KeyGroups, Vec::new());
        for (kg, text) in [(3, "first"), (9, "")] {
            let payload = op.add_payload(bytes::Bytes::from(text));
            op.items
                .push(serde_json::json!({"kg": kg, "payload": payload}));
        }
        let snapshot = TaskSnapshot {
            source: Some(OperatorState::new(
                StateDistribution::RoundRobin,
                vec![serde_json::json!({"file": "a", "rows": 7})],
            )),
            operators: vec![OperatorState::default(), op.clone()],
        };
        let file: bytes::Bytes = encode_task_state(&snapshot).unwrap().into();
        let back = decode_task_state(file.clone()).unwrap();
        assert_eq!(back.source, snapshot.source);
        assert_eq!(back.operators, snapshot.operators);
        assert_eq!(back.operators[1].payloads, op.payloads);
        let err = decode_task_state(file.slice(..file.len() - 1)).unwrap_err();
        assert!(err.to_string().contains("truncated payload"), "{err}");
        let err = decode_task_state(bytes::Bytes::from_static(b"{\"operators\":[]}")).unwrap_err();
        assert!(err.to_string().contains("older Weir"), "{err}");
    }
}
