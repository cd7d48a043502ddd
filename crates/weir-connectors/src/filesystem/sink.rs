//! Exactly-once file sink (two-phase commit) on the local file system or an object store.
//!
//! A subtask encodes rows into an in-memory part. The part is rolled when it reaches
//! `sink.rolling-policy.file-size`, when it is older than
//! `sink.rolling-policy.rollover-interval`, and always at a checkpoint. How a rolled part
//! is pre-committed and committed depends on the store:
//!
//! * **Local file system** (and stores without multipart uploads): the part is written as
//!   a hidden *pending* file `.<part>.pending`; commit renames it atomically to `<part>`.
//! * **Object stores with multipart uploads (S3)**: one multipart upload per part file,
//!   created for the final key. Pre-commit uploads the part's data (5 MiB parts) and
//!   records upload id, part ids and size; a marker `.weir-uploads/<name>.json` remembers
//!   the upload until it is committed. Commit completes the upload: the object appears
//!   atomically, whole.
//!
//! Either way the committable is stored in the checkpoint; a final object that already
//! exists with the expected size means "already committed". After a restore, pending
//! files and uploads of earlier attempts that no checkpoint references are removed (their
//! rows are replayed from the restored source positions).
//!
//! Part names are `part-<lineage>-<job>-<sink>-<attempt>-<subtask>-<n>.<ext>` (see
//! [`PartName`]): the job's lineage (kept by every run restored from its checkpoints), the
//! script (its statements and tables), the sink's place in it, the run. A restore removes
//! only parts of its own lineage and sink, so two jobs writing into one folder never touch
//! each other's parts, even when their scripts have the same shape; and a job started
//! from scratch can tell committed parts of an earlier run of the same script.

use super::format::{Format, PartEncoder};
use crate::two_phase::{Committable, Committer, SinkWriter, TwoPhaseCommitSink};
use arrow::array::Array;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use bytes::Bytes;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_common::{ConnectorOptions, Error, Result};
use weir_runtime::TaskInfo;
use weir_runtime::s3_uploads::UploadLister;
use weir_runtime::storage::resolve;

/// Size of the parts of a multipart upload (S3's minimum for all but the last).
const UPLOAD_PART_SIZE: usize = 5 << 20;
const UPLOADS_DIR: &str = ".weir-uploads";

/// The filesystem sink of one table.
pub struct FileSink {
    schema: SchemaRef,
    format: Format,
    store: Arc<dyn ObjectStore>,
    multipart: Option<Arc<dyn MultipartStore>>,
    uploads: Option<Arc<UploadLister>>,
    root: Path,
    /// The folder on disk, for a local path.
    local: Option<std::path::PathBuf>,
    location: String,
    file_size: u64,
    rollover: Duration,
    /// Indices of `PARTITIONED BY` columns; the files hold the other columns.
    partition_columns: Vec<usize>,
}

impl FileSink {
    /// Validates the options and checks that the target is writable before any data moves.
    pub async fn try_new(
        options: &ConnectorOptions,
        schema: SchemaRef,
        partitioned_by: &[String],
    ) -> Result<Self> {
        options.check_known("filesystem", super::SINK_OPTIONS)?;
        let format = Format::from_options(options)?;
        let location = options.required("path")?.to_string();
        let file_size = options
            .get_memory_size("sink.rolling-policy.file-size")?
            .unwrap_or(128 << 20);
        let rollover = options
            .get_duration("sink.rolling-policy.rollover-interval")?
            .unwrap_or(Duration::from_secs(30 * 60));
        options.get_duration("sink.rolling-policy.check-interval")?;
        let resolved = resolve(&location, true, &super::s3_settings(options)?).map_err(|e| {
            Error::config(format!(
                "table '{}': cannot write to '{location}': {e}",
                options.table
            ))
        })?;
        let (store, root, local) = (resolved.store, resolved.path, resolved.local);
        let probe = root
            .clone()
            .join(format!(".weir-probe-{}", uuid::Uuid::new_v4().simple()));
        store
            .put(&probe, PutPayload::from_static(b"probe"))
            .await
            .map_err(|e| {
                Error::config(format!(
                    "table '{}': path '{location}' is not writable: {e}",
                    options.table
                ))
            })?;
        let _ = store.delete(&probe).await;
        let partition_columns = partitioned_by
            .iter()
            .map(|c| {
                schema.index_of(c).map_err(|_| {
                    Error::config(format!(
                        "table '{}': no partition column '{c}'",
                        options.table
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if !partition_columns.is_empty() && partition_columns.len() == schema.fields().len() {
            return Err(Error::config(format!(
                "table '{}': every column is a partition column; the files would be empty",
                options.table
            )));
        }
        Ok(Self {
            schema,
            format,
            store,
            multipart: resolved.multipart,
            uploads: resolved.uploads,
            root,
            local,
            location,
            file_size,
            rollover,
            partition_columns,
        })
    }
}

impl FileSink {
    /// The store, the sink's folder in it and, for a local path, the folder on disk.
    pub fn storage(&self) -> (Arc<dyn ObjectStore>, Path, Option<std::path::PathBuf>) {
        (self.store.clone(), self.root.clone(), self.local.clone())
    }
}

/// The lineage field of this job's part names: what every run restored from the same
/// checkpoints shares.
fn lineage_tag(task: &TaskInfo) -> String {
    task.lineage.chars().take(16).collect()
}

/// The job field of part names: the script (see [`TaskInfo::job_fingerprint`]), whatever
/// its lineage.
fn job_tag(task: &TaskInfo) -> String {
    format!("{:08x}", task.job_fingerprint as u32)
}

/// The sink field of part names: the sink's own vertex (its uid without the operators
/// chained before it, which depend on the parallelism). Two sinks of one job may write
/// into one folder (two INSERTs into one table).
fn sink_tag(task: &TaskInfo) -> String {
    let own = task.vertex_uid.rsplit('+').next().unwrap_or_default();
    format!("{:08x}", weir_common::fnv32(own))
}

/// The attempt field of part names.
fn attempt_tag(task: &TaskInfo) -> String {
    task.attempt.simple().to_string()[..16].to_string()
}

/// The fields of a part file's name
/// (`[.]part-<lineage>-<job>-<sink>-<attempt>-<subtask>-…`, pending files and upload
/// markers included).
#[derive(Debug, PartialEq)]
struct PartName<'a> {
    hidden: bool,
    lineage: &'a str,
    job: &'a str,
    sink: &'a str,
    attempt: &'a str,
}

impl<'a> PartName<'a> {
    fn parse(name: &'a str) -> Option<Self> {
        let hidden = name.starts_with('.');
        let mut fields = name
            .trim_start_matches('.')
            .strip_prefix("part-")?
            .split('-');
        let (lineage, job, sink, attempt) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        fields.next()?;
        Some(Self {
            hidden,
            lineage,
            job,
            sink,
            attempt,
        })
    }
}

#[async_trait]
impl TwoPhaseCommitSink for FileSink {
    fn name(&self) -> String {
        format!(
            "Sink: filesystem ({}, {})",
            self.location,
            self.format.extension()
        )
    }

    fn create_writer(&self, task: &TaskInfo) -> Result<Box<dyn SinkWriter>> {
        let data_columns: Vec<usize> = (0..self.schema.fields().len())
            .filter(|i| !self.partition_columns.contains(i))
            .collect();
        Ok(Box::new(FileWriter {
            file_schema: Arc::new(self.schema.project(&data_columns)?),
            data_columns,
            partition_columns: self.partition_columns.clone(),
            format: self.format.clone(),
            store: self.store.clone(),
            multipart: self.multipart.clone(),
            root: self.root.clone(),
            prefix: format!(
                "part-{}-{}-{}-{}-{}-",
                lineage_tag(task),
                job_tag(task),
                sink_tag(task),
                attempt_tag(task),
                task.subtask
            ),
            counter: 0,
            open: BTreeMap::new(),
            ready: Vec::new(),
            file_size: self.file_size,
            rollover: self.rollover,
        }))
    }

    async fn earlier_output(&self, task: &TaskInfo) -> Result<Option<String>> {
        // Before a start from scratch every committed part of this job's sink is an
        // earlier run's.
        let (job, sink) = (job_tag(task), sink_tag(task));
        let listing: Vec<_> =
            futures::TryStreamExt::try_collect(self.store.list(Some(&self.root))).await?;
        // Readers skip hidden files and folders (`.x`, `_x`): upload markers, pending parts.
        let visible = |o: &&object_store::ObjectMeta| {
            o.location
                .prefix_match(&self.root)
                .is_some_and(|mut parts| parts.all(|p| !p.as_ref().starts_with(['.', '_'])))
        };
        let mut earlier = listing.iter().filter(visible).filter(|o| {
            o.location
                .filename()
                .and_then(PartName::parse)
                .is_some_and(|p| p.job == job && p.sink == sink)
        });
        let Some(first) = earlier.next() else {
            return Ok(None);
        };
        let more = earlier.count();
        Ok(Some(format!(
            "'{}' already holds {} committed part{} of an earlier run of this job (e.g. '{}')",
            weir_runtime::storage::display_location(&self.location),
            more + 1,
            if more == 0 { "" } else { "s" },
            first.location.filename().unwrap_or_default()
        )))
    }

    fn committer(&self) -> Arc<dyn Committer> {
        let shown_root = super::shown_root(&self.location);
        Arc::new(FileCommitter {
            shown_root,
            store: self.store.clone(),
            multipart: self.multipart.clone(),
            uploads: self.uploads.clone(),
            root: self.root.clone(),
            local: self.local.clone(),
        })
    }
}

struct OpenPart {
    encoder: PartEncoder,
    opened: Instant,
    rows: usize,
}

struct FileWriter {
    /// Schema of the files: the table's columns without the partition columns.
    file_schema: SchemaRef,
    data_columns: Vec<usize>,
    partition_columns: Vec<usize>,
    format: Format,
    store: Arc<dyn ObjectStore>,
    multipart: Option<Arc<dyn MultipartStore>>,
    root: Path,
    prefix: String,
    counter: u64,
    /// Open parts by partition folder (`""` when the table is not partitioned).
    open: BTreeMap<String, OpenPart>,
    ready: Vec<Committable>,
    file_size: u64,
    rollover: Duration,
}

impl FileWriter {
    /// Closes the open part of `partition` and pre-commits it.
    async fn roll(&mut self, partition: &str) -> Result<()> {
        let Some(part) = self.open.remove(partition) else {
            return Ok(());
        };
        if part.rows == 0 {
            return Ok(());
        }
        let bytes = Bytes::from(part.encoder.finish()?);
        let name = format!(
            "{}{}.{}",
            self.prefix,
            self.counter,
            self.format.extension()
        );
        self.counter += 1;
        let dir = partition_dir(&self.root, partition);
        let target = dir.clone().join(name.as_str());
        let (size, rows) = (bytes.len(), part.rows);
        let committable = match &self.multipart {
            None => {
                let pending = dir.clone().join(format!(".{name}.pending"));
                self.store.put(&pending, PutPayload::from(bytes)).await?;
                serde_json::json!({
                    "kind": "rename",
                    "pending": pending.to_string(),
                    "final": target.to_string(),
                    "size": size,
                    "rows": rows,
                })
            }
            Some(mp) => {
                let upload_id = mp.create_multipart(&target).await?;
                // A crash here leaves an upload nothing records: a restore finds it by
                // listing the uploads in progress.
                weir_common::failpoint("after-upload-created")?;
                let marker = self
                    .root
                    .clone()
                    .join(UPLOADS_DIR)
                    .join(format!("{name}.json"));
                let marker_body =
                    serde_json::json!({ "final": target.to_string(), "upload_id": upload_id });
                self.store
                    .put(&marker, PutPayload::from(serde_json::to_vec(&marker_body)?))
                    .await?;
                let mut parts = Vec::new();
                let mut offset = 0;
                while offset < bytes.len() {
                    let end = (offset + UPLOAD_PART_SIZE).min(bytes.len());
                    let chunk = PutPayload::from(bytes.slice(offset..end));
                    let part = mp.put_part(&target, &upload_id, parts.len(), chunk).await?;
                    parts.push(part.content_id);
                    offset = end;
                }
                serde_json::json!({
                    "kind": "multipart",
                    "final": target.to_string(),
                    "upload_id": upload_id,
                    "parts": parts,
                    "size": size,
                    "rows": rows,
                    "marker": marker.to_string(),
                })
            }
        };
        weir_common::failpoint("after-pending-upload")?;
        self.ready.push(committable);
        Ok(())
    }
}

#[async_trait]
impl SinkWriter for FileWriter {
    async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        if self.partition_columns.is_empty() {
            return self.write_to("", batch).await;
        }
        let (data, ops) = weir_common::changelog::split(&batch);
        for (partition, rows) in partition_rows(&data, &self.partition_columns)? {
            let indices = arrow::array::UInt32Array::from(rows);
            let columns = self
                .data_columns
                .iter()
                .map(|c| arrow::compute::take(data.column(*c), &indices, None))
                .collect::<Result<Vec<_>, _>>()?;
            let mut part = RecordBatch::try_new(self.file_schema.clone(), columns)?;
            if let Some(ops) = &ops {
                let ops = arrow::compute::take(ops, &indices, None)?;
                part = weir_common::changelog::attach(&part, ops)?;
            }
            self.write_to(&partition, part).await?;
        }
        Ok(())
    }

    async fn prepare_commit(&mut self) -> Result<Vec<Committable>> {
        let partitions: Vec<String> = self.open.keys().cloned().collect();
        for p in partitions {
            self.roll(&p).await?;
        }
        Ok(std::mem::take(&mut self.ready))
    }
}

impl FileWriter {
    async fn write_to(&mut self, partition: &str, batch: RecordBatch) -> Result<()> {
        if !self.open.contains_key(partition) {
            let part = OpenPart {
                encoder: PartEncoder::new(&self.format, &self.file_schema)?,
                opened: Instant::now(),
                rows: 0,
            };
            self.open.insert(partition.to_string(), part);
        }
        let part = self.open.get_mut(partition).expect("open part");
        part.encoder.write(&batch)?;
        part.rows += batch.num_rows();
        if part.encoder.size() as u64 >= self.file_size || part.opened.elapsed() >= self.rollover {
            self.roll(partition).await?;
        }
        Ok(())
    }
}

/// Hive-style partition folder of every row (`a=1/b=x`), with the rows of each.
fn partition_rows(batch: &RecordBatch, columns: &[usize]) -> Result<BTreeMap<String, Vec<u32>>> {
    let options = arrow::util::display::FormatOptions::default();
    let formatters = columns
        .iter()
        .map(|c| arrow::util::display::ArrayFormatter::try_new(batch.column(*c).as_ref(), &options))
        .collect::<Result<Vec<_>, _>>()?;
    let schema = batch.schema();
    let mut out: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for row in 0..batch.num_rows() {
        let mut path = String::new();
        for (f, c) in formatters.iter().zip(columns) {
            if !path.is_empty() {
                path.push('\u{0}');
            }
            let value = if batch.column(*c).is_null(row) {
                DEFAULT_PARTITION.to_string()
            } else {
                non_empty(f.value(row).to_string())
            };
            path.push_str(&format!("{}={value}", schema.field(*c).name()));
        }
        out.entry(path).or_default().push(row as u32);
    }
    Ok(out)
}

/// The folder of a partition key built by [`partition_rows`] (`a=1/b=x`).
fn partition_dir(root: &Path, partition: &str) -> Path {
    partition
        .split('\u{0}')
        .filter(|p| !p.is_empty())
        .fold(root.clone(), |p, c| p.join(c))
}

/// Flink's `partition.default-name`: the folder of NULL partition values.
const DEFAULT_PARTITION: &str = "__DEFAULT_PARTITION__";

/// An empty value gets the default partition's name. Characters a path cannot hold
/// (`/` among them) are percent-encoded by `object_store`'s path parts, as Hive does.
fn non_empty(v: String) -> String {
    if v.is_empty() {
        DEFAULT_PARTITION.to_string()
    } else {
        v
    }
}

struct FileCommitter {
    /// What goes before an object's path in messages: `/` locally, `s3://bucket/` on S3.
    shown_root: String,
    store: Arc<dyn ObjectStore>,
    multipart: Option<Arc<dyn MultipartStore>>,
    uploads: Option<Arc<UploadLister>>,
    root: Path,
    local: Option<std::path::PathBuf>,
}

/// Removes, under `dir`, the staging files (`<name>#<digits>`) that a crash in the middle
/// of a local object-store write leaves beside the parts `stale` selects; the object
/// store itself never lists them.
fn remove_local_staging(dir: &std::path::Path, stale: &dyn Fn(&str) -> bool) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            remove_local_staging(&path, stale)?;
            continue;
        }
        let name = entry.file_name().to_string_lossy().to_string();
        let Some((base, n)) = name.rsplit_once('#') else {
            continue;
        };
        if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && stale(base) {
            tracing::info!(
                "removing a partial write of an earlier attempt: {}",
                path.display()
            );
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

fn field<'a>(c: &'a Committable, key: &str) -> Result<&'a str> {
    c.get(key)
        .and_then(|v| v.as_str())
        .ok_or_else(|| Error::Checkpoint(format!("file committable without '{key}': {c}")))
}

impl FileCommitter {
    /// An object's path as the user knows it (object-store paths have no leading `/`).
    fn shown(&self, path: &Path) -> String {
        format!("{}{path}", self.shown_root)
    }

    /// `Some(true)`: the final object exists with the expected size (committed);
    /// `Some(false)`: it does not exist.
    async fn committed(&self, target: &Path, size: u64) -> Result<bool> {
        match self.store.head(target).await {
            Ok(meta) if meta.size == size => Ok(true),
            Ok(meta) => Err(Error::external(format!(
                "cannot commit '{}': an object of {} bytes is already there (expected {size}); not overwriting it",
                self.shown(target),
                meta.size
            ))),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

impl FileCommitter {
    /// Deletes the upload marker of a published file. The file is committed whatever
    /// happens here; the marker is only bookkeeping, so a store that is briefly
    /// unreachable (an S3 outage the client's own retries gave up on) is retried for a
    /// while, then the marker is left for the next restore's cleanup, with a warning.
    async fn delete_marker(&self, c: &Committable) {
        let Some(marker) = field(c, "marker").ok().and_then(|m| Path::parse(m).ok()) else {
            return;
        };
        let mut last = None;
        for attempt in 0..20u32 {
            match self.store.delete(&marker).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => return,
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(std::time::Duration::from_millis(
                100 * u64::from(attempt.min(5) + 1),
            ))
            .await;
        }
        if let Some(e) = last {
            tracing::warn!(marker = %marker, error = %e, "could not delete an upload marker; the next restore removes it");
        }
    }
}

#[async_trait]
impl Committer for FileCommitter {
    async fn commit(&self, c: &Committable) -> Result<()> {
        let target =
            Path::parse(field(c, "final")?).map_err(|e| Error::Checkpoint(e.to_string()))?;
        let size = c.get("size").and_then(|v| v.as_u64()).unwrap_or(0);
        let kind = c.get("kind").and_then(|v| v.as_str()).unwrap_or("rename");
        if self.committed(&target, size).await? {
            self.delete_marker(c).await;
            return Ok(());
        }
        weir_common::failpoint("commit-before-publish")?;
        let published = match kind {
            "multipart" => {
                let mp = self.multipart.as_ref().ok_or_else(|| {
                    Error::Checkpoint(format!(
                        "'{}' was uploaded in parts, but its store has no multipart uploads",
                        self.shown(&target)
                    ))
                })?;
                let upload_id = field(c, "upload_id")?.to_string();
                let parts: Vec<PartId> = c
                    .get("parts")
                    .and_then(|p| p.as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str())
                            .map(|s| PartId {
                                content_id: s.to_string(),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                mp.complete_multipart(&target, &upload_id, parts)
                    .await
                    .map(|_| ())
            }
            _ => {
                self.store
                    .rename(
                        &Path::parse(field(c, "pending")?)
                            .map_err(|e| Error::Checkpoint(e.to_string()))?,
                        &target,
                    )
                    .await
            }
        };
        match published {
            Ok(()) => {}
            // A crash after publishing and before recording it: the object is there.
            Err(e) if self.committed(&target, size).await.unwrap_or(false) => {
                tracing::debug!("'{target}' was already committed ({e})");
            }
            Err(e) => {
                return Err(Error::external(format!(
                    "cannot commit '{}': {e}",
                    self.shown(&target)
                )));
            }
        }
        weir_common::failpoint("commit-after-publish")?;
        self.delete_marker(c).await;
        Ok(())
    }

    async fn abort_stale(&self, task: &TaskInfo, recovered: &[Committable]) -> Result<()> {
        let current = attempt_tag(task);
        let (lineage, sink) = (lineage_tag(task), sink_tag(task));
        // Only this sink's parts of this lineage left by earlier attempts: another job (or
        // another sink of this job) may write into the same folder and still have to
        // re-commit its own pending parts.
        let ours = |name: &str| {
            PartName::parse(name)
                .is_some_and(|p| p.lineage == lineage && p.sink == sink && p.attempt != current)
        };
        // A crash while a part was being written locally leaves a staging file beside it.
        if let Some(dir) = &self.local {
            let partial = |name: &str| name.ends_with(".pending") && ours(name);
            remove_local_staging(dir, &partial)?;
        }
        let listing: Vec<_> =
            futures::TryStreamExt::try_collect(self.store.list(Some(&self.root))).await?;
        for obj in listing {
            let Some(name) = obj.location.filename() else {
                continue;
            };
            let stale = name.starts_with(".part-")
                && name.ends_with(".pending")
                && ours(name)
                && !recovered
                    .iter()
                    .any(|c| field(c, "pending").ok() == Some(obj.location.as_ref()));
            if stale {
                tracing::info!(
                    "removing uncommitted part '{}' of an earlier attempt",
                    self.shown(&obj.location)
                );
                self.store.delete(&obj.location).await?;
            }
        }
        let uploads = self.root.clone().join(UPLOADS_DIR);
        let markers = self.store.list_with_delimiter(Some(&uploads)).await?;
        for obj in markers.objects {
            let Some(name) = obj.location.filename() else {
                continue;
            };
            let referenced = recovered
                .iter()
                .any(|c| field(c, "marker").ok() == Some(obj.location.as_ref()));
            if referenced || !ours(name) {
                continue;
            }
            let body = self.store.get(&obj.location).await?.bytes().await?;
            let marker: serde_json::Value = serde_json::from_slice(&body)?;
            if let (Some(mp), Ok(target), Ok(id)) = (
                &self.multipart,
                field(&marker, "final"),
                field(&marker, "upload_id"),
            ) {
                tracing::info!("aborting the upload of '{target}' left by an earlier attempt");
                let _ = mp
                    .abort_multipart(
                        &Path::parse(target).map_err(|e| Error::Checkpoint(e.to_string()))?,
                        &id.to_string(),
                    )
                    .await;
            }
            self.store.delete(&obj.location).await?;
        }
        // Uploads started just before a crash, before their marker was written.
        if let (Some(lister), Some(mp)) = (&self.uploads, &self.multipart) {
            for upload in lister.list(&self.root).await? {
                let referenced = recovered
                    .iter()
                    .any(|c| field(c, "upload_id").ok() == Some(upload.upload_id.as_str()));
                if referenced || !upload.key.filename().is_some_and(ours) {
                    continue;
                }
                tracing::info!(
                    "aborting the upload of '{}' left by an earlier attempt",
                    upload.key
                );
                let _ = mp.abort_multipart(&upload.key, &upload.upload_id).await;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod part_name_tests {
    use super::PartName;

    #[test]
    fn part_names_parse_hidden_or_not_and_reject_others() {
        let name = "part-0123456789abcdef-0a0b0c0d-11223344-aaaabbbbccccdddd-1-7.json";
        let p = PartName::parse(name).unwrap();
        assert_eq!(
            (p.hidden, p.lineage, p.job, p.sink, p.attempt),
            (
                false,
                "0123456789abcdef",
                "0a0b0c0d",
                "11223344",
                "aaaabbbbccccdddd"
            )
        );
        let pending = format!(".{name}.pending");
        assert!(PartName::parse(&pending).unwrap().hidden);
        assert_eq!(PartName::parse("part-a-b-c.json"), None);
        assert_eq!(PartName::parse("data.json"), None);
    }
}
