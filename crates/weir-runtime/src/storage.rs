//! Checkpoint storage on `object_store`.
//!
//! Layout: `<dir>/<job-id>/chk-<N>/<task>.json` for task state and
//! `<dir>/<job-id>/chk-<N>/_metadata`, written last. Object stores write whole objects
//! atomically (the local file system writes a staging file and renames it), so a
//! checkpoint either has a complete `_metadata` or does not exist.

use crate::checkpoint::{CheckpointMetadata, FileDigest, SubtaskEntry, TaskSnapshot};
use crate::state_file::{Piece, SharedAt, SharedNames, file_pieces, plan_shared_with};
pub use crate::state_file::{decode_task_state, encode_task_state};
use crate::state_io::{put_pieces, write_inlined};
use futures::TryStreamExt;
use object_store::multipart::MultipartStore;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use weir_common::{CheckpointId, Error, JobId, Result};
use weir_state::spill::StateMemory;

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
    /// Large keyed payloads go to the shared folder (see [`crate::state_file`]).
    incremental: bool,
}

/// The shared objects checkpoint `meta` refers to (see [`SharedAt`]).
pub fn shared_objects(meta: &CheckpointMetadata) -> HashSet<String> {
    meta.vertices
        .iter()
        .flat_map(|v| &v.subtasks)
        .flat_map(|s| &s.shared)
        .map(|r| SharedAt::object_of(r).to_string())
        .collect()
}

/// Where the shared payloads of written references `refs` are (see [`SharedAt`]), by
/// name.
pub fn shared_payloads<'a>(
    refs: impl IntoIterator<Item = &'a String>,
) -> HashMap<String, SharedAt> {
    refs.into_iter()
        .filter_map(|r| SharedAt::parse(r).ok())
        .map(|at| (at.name.clone(), at))
        .collect()
}

/// What writing a task's state did.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct WrittenState {
    /// Of the state file.
    pub digest: FileDigest,
    /// Shared payloads the state file refers to, as [`SharedAt`] references (sorted).
    pub shared: Vec<String>,
    /// Size of the whole state: the file and every shared object it refers to.
    pub full_size: u64,
    /// Bytes written for this checkpoint: the file and the shared objects not already
    /// there.
    pub written: u64,
}

impl CheckpointStorage {
    pub fn new(store: Arc<dyn ObjectStore>, base: &Path, job_id: JobId) -> Self {
        Self {
            store,
            job_root: base.clone().join(job_id.to_string()),
            local_root: None,
            incremental: false,
        }
    }

    /// Whether checkpoints are incremental (`execution.checkpointing.incremental`).
    pub fn incremental(mut self, on: bool) -> Self {
        self.incremental = on;
        self
    }

    /// The folder of the job's shared state objects.
    fn shared_root(&self) -> Path {
        self.job_root.clone().join("shared")
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

    /// Writes a task's state file (see [`crate::state_file`]). With incremental
    /// checkpoints, large keyed payloads go to the shared folder, all of them in one new
    /// object, unless `known` (the shared payloads of the task's previous snapshot, by
    /// name) says where they are already; `names` caches the names of the previous
    /// snapshot's payloads.
    pub async fn write_task_state(
        &self,
        id: CheckpointId,
        file: &str,
        snapshot: &TaskSnapshot,
        known: &HashMap<String, SharedAt>,
        names: &mut SharedNames,
    ) -> Result<WrittenState> {
        let mut plan = if self.incremental {
            plan_shared_with(snapshot, names)
        } else {
            Vec::new()
        };
        let object = format!("{}-{}", id.0, uuid::Uuid::new_v4().simple());
        let states = snapshot.source.iter().chain(&snapshot.operators);
        let mut refs: HashMap<String, SharedAt> = HashMap::new();
        let mut new = Vec::new();
        let (mut full_size, mut written) = (0, 0);
        for (state, plan) in states.zip(&mut plan) {
            for (p, name) in plan.iter_mut().enumerate() {
                let Some(name) = name else { continue };
                let size = state.payload_len(p);
                full_size += size;
                let at = refs.entry(name.clone()).or_insert_with(|| {
                    known.get(name.as_str()).cloned().unwrap_or_else(|| {
                        new.push(match state.disk_payload(p) {
                            Some(on_disk) => Piece::Disk(on_disk.clone()),
                            None => Piece::Bytes(state.payloads[p].clone()),
                        });
                        written += size;
                        SharedAt {
                            name: name.clone(),
                            object: object.clone(),
                            offset: written - size,
                        }
                    })
                });
                *name = at.to_string();
            }
        }
        // One object for every new payload; one it keeps on disk is read only now.
        if !new.is_empty() {
            let pieces = futures::stream::iter(new.into_iter().map(Piece::read));
            let path = self.shared_root().join(object.as_str());
            put_pieces(&self.store, &path, written, pieces).await?;
        }
        let pieces = file_pieces(snapshot, &plan)?;
        let total = pieces.iter().map(Piece::len).sum();
        let pieces = futures::stream::iter(pieces.into_iter().map(Piece::read));
        let path = self.checkpoint_path(id).join(file);
        let digest = put_pieces(&self.store, &path, total, pieces).await?;
        let mut shared: Vec<String> = refs.values().map(SharedAt::to_string).collect();
        shared.sort_unstable();
        Ok(WrittenState {
            full_size: full_size + digest.size,
            written: written + digest.size,
            digest,
            shared,
        })
    }

    /// The shared objects checkpoint `id` refers to (none if it has no `_metadata`).
    pub async fn shared_refs(&self, id: CheckpointId) -> Result<HashSet<String>> {
        let path = self.checkpoint_path(id).join("_metadata");
        let bytes = match self.store.get(&path).await {
            Ok(got) => got.bytes().await?,
            Err(object_store::Error::NotFound { .. }) => return Ok(HashSet::new()),
            Err(e) => return Err(e.into()),
        };
        let meta: CheckpointMetadata = serde_json::from_slice(&bytes)?;
        Ok(shared_objects(&meta))
    }

    /// Deletes shared objects of the job that `keep` does not hold: those in `candidates`,
    /// or every one in the folder when `candidates` is `None` (at the end of a job, when
    /// no task writes any more).
    pub async fn delete_shared(
        &self,
        candidates: Option<HashSet<String>>,
        keep: &HashSet<String>,
    ) -> Result<()> {
        let names: Vec<String> = match candidates {
            Some(c) => c.into_iter().collect(),
            None => {
                let root = self.shared_root();
                let listed: Vec<_> = self.store.list(Some(&root)).try_collect().await?;
                listed
                    .into_iter()
                    .filter_map(|o| o.location.filename().map(str::to_string))
                    .collect()
            }
        };
        for name in names.into_iter().filter(|n| !keep.contains(n)) {
            match self
                .store
                .delete(&self.shared_root().join(name.as_str()))
                .await
            {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
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
        let mut meta = meta.clone();
        for v in &mut meta.vertices {
            for s in &mut v.subtasks {
                let Some(file) = &s.state_file else { continue };
                let got = self.store.get(&source.clone().join(file.as_str())).await?;
                let path = target.clone().join(file.as_str());
                if s.shared.is_empty() {
                    let total = got.meta.size;
                    let pieces = got.into_stream().map_err(Error::from);
                    put_pieces(&store, &path, total, pieces).await?;
                    continue;
                }
                // Savepoints are self-contained: shared payloads go inline. (The state
                // file itself is small: its large payloads are the shared ones.)
                let bytes = got.bytes().await?;
                let digest =
                    write_inlined(&self.store, &self.shared_root(), bytes, &store, &path).await?;
                s.state_digest = Some(digest);
                s.shared.clear();
            }
        }
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

    /// The checkpoint's folder on local disk, if it is there.
    pub fn local_folder(&self) -> Option<std::path::PathBuf> {
        match self.location.strip_prefix("file://") {
            Some(path) => Some(path.into()),
            None => (!self.location.contains("://")).then(|| self.location.clone().into()),
        }
    }

    /// Reads the state file of `entry`, checking its size and checksum, and the shared
    /// objects it refers to; onto local disk under `local` when given (see
    /// [`crate::state_io`]).
    pub async fn read_task_state(
        &self,
        entry: &SubtaskEntry,
        memory: Option<&StateMemory>,
    ) -> Result<Option<TaskSnapshot>> {
        let Some(file) = &entry.state_file else {
            return Ok(None);
        };
        let corrupt = |why: String| {
            Error::CorruptCheckpoint(format!("'{}/{file}' is corrupt: {why}", self.location))
        };
        let Some(expected) = &entry.state_digest else {
            return Err(corrupt("the checkpoint recorded no checksum for it".into()));
        };
        let parts: Vec<_> = self.path.parts().collect();
        let shared_root: Path = parts[..parts.len().saturating_sub(1)]
            .iter()
            .cloned()
            .collect::<Path>()
            .join("shared");
        let path = self.path.clone().join(file.as_str());
        let folder = self.local_folder();
        let local = memory.map(|memory| crate::state_io::Local {
            memory,
            folder: folder.as_deref(),
        });
        crate::state_io::read_task_state(
            &self.store,
            (&path, file),
            expected,
            &shared_root,
            local,
            corrupt,
        )
        .await
        .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::{
        OperatorState, StateDistribution, SubtaskStatus, TaskSnapshot, VertexEntry,
    };

    /// Reads `entry` of `restored` keeping its payloads on local disk, twice: from the
    /// checkpoint's folder on local disk, whose files are read in place, and as if the
    /// checkpoint were elsewhere, which copies them under `local`'s folder.
    async fn read_on_local_disk(
        restored: &RestoredCheckpoint,
        entry: &SubtaskEntry,
        local: &StateMemory,
    ) -> Vec<Result<TaskSnapshot>> {
        let mut remote = restored.clone();
        remote.location = format!("elsewhere://{}", restored.location);
        assert!(remote.local_folder().is_none());
        let mut read = Vec::new();
        for from in [restored, &remote] {
            read.push(
                from.read_task_state(entry, Some(local))
                    .await
                    .map(Option::unwrap),
            );
        }
        read
    }

    /// An incremental checkpoint writes a large key group once, refers to it from later
    /// checkpoints, restores it from the shared folder, and a savepoint of it is whole.
    #[tokio::test]
    async fn shared_state_is_written_once_read_back_and_inlined_in_savepoints() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_str().unwrap().to_string();
        let job = JobId::new();
        let storage = CheckpointStorage::at(&dir, job).unwrap().incremental(true);
        let mut op = OperatorState::new(StateDistribution::KeyGroups, Vec::new());
        // Large enough that the savepoint's state file is uploaded in parts and that a
        // restore given local disk keeps even that file there.
        let big = crate::state_io::STREAM_MIN_BYTES as usize + 10_000;
        let key_group = bytes::Bytes::from((0..big).map(|i| (i % 251) as u8).collect::<Vec<_>>());
        // A small key group, which changes between the two checkpoints, before the large
        // one (so that the large one is not at the start of its object).
        let small = |byte: u8| bytes::Bytes::from(vec![byte; 10_000]);
        let payload = op.add_payload(small(1));
        op.items
            .push(serde_json::json!({"kg": 3, "payload": payload}));
        let payload = op.add_payload(key_group.clone());
        op.items
            .push(serde_json::json!({"kg": 5, "payload": payload}));
        let mut snapshot = TaskSnapshot {
            source: None,
            operators: vec![op],
        };
        let first = storage
            .write_task_state(
                CheckpointId(1),
                "t-0.state",
                &snapshot,
                &HashMap::new(),
                &mut Default::default(),
            )
            .await
            .unwrap();
        // Both key groups, in one object.
        let objects = |refs: &[String]| -> HashSet<String> {
            refs.iter()
                .map(|r| SharedAt::object_of(r).to_string())
                .collect()
        };
        assert_eq!(first.shared.len(), 2);
        assert_eq!(objects(&first.shared).len(), 1);
        assert!(first.written > big as u64 + 10_000);
        let known = shared_payloads(&first.shared);
        snapshot.operators[0].payloads[0] = small(2);
        let second = storage
            .write_task_state(
                CheckpointId(2),
                "t-0.state",
                &snapshot,
                &known,
                &mut Default::default(),
            )
            .await
            .unwrap();
        // The large key group is referred to where it is; the small one is new.
        let big_ref = first
            .shared
            .iter()
            .find(|r| second.shared.contains(r))
            .expect("the unchanged key group keeps its reference");
        assert_eq!(objects(&second.shared).len(), 2);
        assert!(
            second.written < 12_000,
            "wrote {} bytes again",
            second.written
        );
        assert!(second.full_size > big as u64);
        let meta = CheckpointMetadata {
            format_version: crate::checkpoint::FORMAT_VERSION,
            job_id: job.to_string(),
            lineage: "l".into(),
            checkpoint_id: CheckpointId(2),
            savepoint: false,
            completed_at_ms: 0,
            max_parallelism: 128,
            vertices: vec![VertexEntry {
                uid: "v".into(),
                name: "v".into(),
                parallelism: 1,
                subtasks: vec![SubtaskEntry {
                    subtask: 0,
                    status: SubtaskStatus::Running,
                    state_file: Some("t-0.state".into()),
                    state_digest: Some(second.digest.clone()),
                    shared: second.shared.clone(),
                }],
            }],
            checksum: None,
        };
        storage.write_metadata(&meta).await.unwrap();
        let location = format!("{dir}/{job}/chk-2");
        let restored = RestoredCheckpoint::open(&location).await.unwrap();
        let entry = &restored.metadata.vertices[0].subtasks[0];
        let back = restored
            .read_task_state(entry, None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(back.operators, snapshot.operators);
        let spill = tmp.path().join("spill");
        let local = StateMemory::new(1 << 20, spill.clone());
        let on_disk = |back: &TaskSnapshot| {
            let op = &back.operators[0];
            assert!(op.payloads[1].is_empty(), "the payload is not in memory");
            let kept = op.disk_payload(1).expect("the payload is on local disk");
            assert_eq!(kept.name, crate::state_file::shared_name(&key_group));
            assert_eq!(op.payload(&op.items[1]).unwrap(), key_group);
            assert_eq!(op.payload(&op.items[0]).unwrap(), small(2));
        };
        for back in read_on_local_disk(&restored, entry, &local).await {
            on_disk(&back.unwrap());
        }
        assert_eq!(
            std::fs::read_dir(&spill).unwrap().count(),
            0,
            "copies are unlinked"
        );
        // Either way, the bytes are checked against the object's name.
        let object = tmp
            .path()
            .join(format!("{job}/shared/{}", SharedAt::object_of(big_ref)));
        let mut altered = std::fs::read(&object).unwrap();
        let at = SharedAt::parse(big_ref).unwrap().offset as usize;
        assert_eq!(at, 10_000);
        altered[at + big / 2] ^= 1;
        std::fs::write(&object, &altered).unwrap();
        for back in read_on_local_disk(&restored, entry, &local).await {
            let err = back.unwrap_err();
            assert!(err.to_string().contains("do not match its name"), "{err}");
        }
        altered[at + big / 2] ^= 1;
        std::fs::write(&object, &altered).unwrap();

        let savepoints = tmp.path().join("sp");
        let sp = storage
            .copy_to_savepoint(&meta, savepoints.to_str().unwrap())
            .await
            .unwrap();
        // The savepoint needs nothing of the job's folder.
        std::fs::remove_dir_all(tmp.path().join(job.to_string())).unwrap();
        let restored = RestoredCheckpoint::open(&sp).await.unwrap();
        let entry = &restored.metadata.vertices[0].subtasks[0];
        assert!(entry.shared.is_empty());
        let back = restored
            .read_task_state(entry, None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(back.operators, snapshot.operators);
        // A state file this large is kept on local disk, its inline payloads with it.
        for back in read_on_local_disk(&restored, entry, &local).await {
            on_disk(&back.unwrap());
        }
        // A copy whose bytes differ from the recorded checksum is refused.
        let file = tmp.path().join("sp").join(sp.rsplit('/').next().unwrap());
        let file = std::fs::read_dir(file)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "state"))
            .unwrap();
        let mut altered = std::fs::read(&file).unwrap();
        *altered.last_mut().unwrap() ^= 1;
        std::fs::write(&file, &altered).unwrap();
        for back in read_on_local_disk(&restored, entry, &local).await {
            let err = back.unwrap_err();
            assert!(err.to_string().contains("the checkpoint recorded"), "{err}");
        }
    }
}
