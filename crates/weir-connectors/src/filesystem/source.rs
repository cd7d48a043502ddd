//! File source: a file or a folder (recursively; names starting with `.` or `_` are
//! skipped) of Parquet, CSV or JSON files. Each file is a split; a split's position is the
//! number of rows already emitted, so a restore resumes mid-file.
//!
//! Bounded by default: the files present when the job starts, dealt round-robin to the
//! subtasks. With `source.monitor-interval` the source is unbounded (Flink's continuous
//! file monitoring): each subtask lists the folder every interval and reads the new files
//! it owns (by a hash of the path); it remembers every file it finished, and the state is
//! union state, so after a restore at any parallelism each file is read by exactly one
//! subtask, once.

use super::format::Format;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use weir_common::{CheckpointId, ConnectorOptions, Error, Result};
use weir_runtime::storage::resolve;
use weir_runtime::{OperatorState, Source, SourceFactory, SourcePoll, StateDistribution, TaskInfo};

pub struct FileSourceFactory {
    schema: SchemaRef,
    /// The metadata columns of `schema` and what each one holds.
    metadata: Arc<Vec<(usize, FileMetadata)>>,
    /// The columns the files hold (`schema` without the metadata columns).
    physical: SchemaRef,
    format: Format,
    store: Arc<dyn ObjectStore>,
    location: String,
    root: Path,
    /// The files of a bounded source.
    files: Vec<Path>,
    /// `source.monitor-interval`: unbounded, listing the folder this often.
    monitor: Option<Duration>,
    /// The connector, for the source's name.
    connector: &'static str,
    /// Values of the columns a file does not hold (a table format's partition columns),
    /// by file: one row each, in the order of the `FileMetadata::Column`s.
    constants: Arc<std::collections::HashMap<String, Vec<arrow::array::ArrayRef>>>,
}

fn is_hidden(path: &Path, root: &Path) -> bool {
    path.prefix_match(root)
        .map(|parts| {
            parts
                .into_iter()
                .any(|p| p.as_ref().starts_with('.') || p.as_ref().starts_with('_'))
        })
        .unwrap_or(false)
}

/// The visible files at `root` (the file itself, or the files of the folder), sorted.
pub(super) async fn list_files(
    store: &dyn ObjectStore,
    root: &Path,
    location: &str,
) -> Result<Vec<Path>> {
    if let Ok(meta) = store.head(root).await {
        return Ok(vec![meta.location]);
    }
    let mut files: Vec<Path> = store
        .list(Some(root))
        .map_ok(|m| m.location)
        .try_collect::<Vec<_>>()
        .await
        .map_err(|e| Error::input(format!("cannot list '{location}': {e}")))?
        .into_iter()
        .filter(|p| !is_hidden(p, root))
        .collect();
    files.sort();
    Ok(files)
}

/// The subtask that reads `file` in a monitored source of `parallelism` subtasks.
fn owner(file: &str, parallelism: usize) -> usize {
    weir_common::fnv32(file) as usize % parallelism.max(1)
}

impl FileSourceFactory {
    pub async fn try_new(
        options: &ConnectorOptions,
        schema: SchemaRef,
        metadata: &[(String, String)],
    ) -> Result<Self> {
        options.check_known("filesystem", super::SOURCE_OPTIONS)?;
        let metadata = crate::metadata::resolve(
            options,
            "filesystem",
            &schema,
            metadata,
            FileMetadata::KEYS,
            FileMetadata::from_key,
        )?;
        let physical = crate::metadata::physical_schema(&schema, &metadata);
        let monitor = options
            .get("source.monitor-interval")
            .map(|v| {
                weir_common::config::parse_duration(v)
                    .ok()
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| {
                        Error::config(format!(
                            "table '{}': invalid 'source.monitor-interval' '{v}': expected a \
                             positive duration such as '1 s'",
                            options.table
                        ))
                    })
            })
            .transpose()?;
        let format = Format::from_options(options)?;
        let location = options.required("path")?.to_string();
        let resolved = resolve(&location, false, &super::s3_settings(options)?)?;
        let (store, root) = (resolved.store, resolved.path);
        let files = list_files(store.as_ref(), &root, &location).await?;
        if files.is_empty() && monitor.is_none() {
            return Err(Error::input(format!(
                "table '{}': path '{location}' does not exist or holds no files",
                options.table
            )));
        }
        Ok(Self {
            schema,
            metadata: Arc::new(metadata),
            physical,
            format,
            store,
            location,
            root,
            files,
            monitor,
            constants: Default::default(),
            connector: "filesystem",
        })
    }

    /// A bounded source of the Parquet `files` given with the values of the columns of
    /// `schema` they do not hold (`constant_columns`, in that order): the files of a
    /// table format's snapshot, whose partition values live in its log.
    pub(crate) fn of_files(
        connector: &'static str,
        schema: SchemaRef,
        store: Arc<dyn ObjectStore>,
        location: String,
        root: Path,
        constant_columns: &[usize],
        files: Vec<(Path, Vec<arrow::array::ArrayRef>)>,
    ) -> Self {
        let metadata: Vec<(usize, FileMetadata)> = constant_columns
            .iter()
            .enumerate()
            .map(|(k, c)| (*c, FileMetadata::Column(k)))
            .collect();
        let physical = crate::metadata::physical_schema(&schema, &metadata);
        let constants = files
            .iter()
            .map(|(path, values)| (path.to_string(), values.clone()))
            .collect();
        Self {
            schema,
            metadata: Arc::new(metadata),
            physical,
            format: Format::Parquet,
            store,
            location,
            root,
            files: files.into_iter().map(|(path, _)| path).collect(),
            monitor: None,
            constants: Arc::new(constants),
            connector,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct FileSplit {
    file: String,
    /// Rows of this file already emitted.
    rows: u64,
    /// Read completely (a monitored source remembers finished files).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    done: bool,
}

/// What a monitored source keeps beyond its splits.
struct Monitor {
    interval: Duration,
    root: Path,
    location: String,
    /// Files this subtask finished.
    done: BTreeSet<String>,
    subtask: usize,
    parallelism: usize,
    next_scan: Instant,
}

impl SourceFactory for FileSourceFactory {
    fn name(&self) -> String {
        match self.monitor {
            Some(every) => format!(
                "Source: filesystem ({}, monitored every {every:?})",
                self.location
            ),
            None => format!(
                "Source: {} ({}, {} files)",
                self.connector,
                self.location,
                self.files.len()
            ),
        }
    }
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn is_bounded(&self) -> bool {
        self.monitor.is_none()
    }
    fn create(&self, task: &TaskInfo, restored: Option<OperatorState>) -> Result<Box<dyn Source>> {
        if let Some(interval) = self.monitor {
            // Union state: every subtask sees every file's record and keeps its own.
            let mut monitor = Monitor {
                interval,
                root: self.root.clone(),
                location: self.location.clone(),
                done: BTreeSet::new(),
                subtask: task.subtask,
                parallelism: task.parallelism,
                next_scan: Instant::now(),
            };
            let mut splits = VecDeque::new();
            for item in restored.map(|s| s.items).unwrap_or_default() {
                let split: FileSplit = serde_json::from_value(item)?;
                if owner(&split.file, task.parallelism) != task.subtask {
                    continue;
                }
                if split.done {
                    monitor.done.insert(split.file);
                } else {
                    splits.push_back(split);
                }
            }
            return Ok(Box::new(FileSource {
                schema: self.schema.clone(),
                metadata: self.metadata.clone(),
                physical: self.physical.clone(),
                shown_root: super::shown_root(&self.location),
                format: self.format.clone(),
                store: self.store.clone(),
                splits,
                current: VecDeque::new(),
                monitor: Some(monitor),
                metrics: task.metrics.clone(),
                constants: self.constants.clone(),
            }));
        }
        let splits: VecDeque<FileSplit> = match restored {
            Some(state) => state
                .items
                .into_iter()
                .map(serde_json::from_value)
                .collect::<Result<_, _>>()?,
            None => self
                .files
                .iter()
                .enumerate()
                .filter(|(i, _)| i % task.parallelism == task.subtask)
                .map(|(_, f)| FileSplit {
                    file: f.to_string(),
                    rows: 0,
                    done: false,
                })
                .collect(),
        };
        Ok(Box::new(FileSource {
            schema: self.schema.clone(),
            metadata: self.metadata.clone(),
            physical: self.physical.clone(),
            shown_root: super::shown_root(&self.location),
            format: self.format.clone(),
            store: self.store.clone(),
            splits,
            current: VecDeque::new(),
            monitor: None,
            metrics: task.metrics.clone(),
            constants: self.constants.clone(),
        }))
    }
}

struct FileSource {
    schema: SchemaRef,
    metadata: Arc<Vec<(usize, FileMetadata)>>,
    /// The columns the files hold.
    physical: SchemaRef,
    /// Put before a file's object-store path in messages (see `shown_root`).
    shown_root: String,
    format: Format,
    store: Arc<dyn ObjectStore>,
    /// Unfinished splits; the first one is being read.
    splits: VecDeque<FileSplit>,
    /// Decoded batches of the first split not yet emitted.
    current: VecDeque<RecordBatch>,
    monitor: Option<Monitor>,
    /// Counts records skipped by `*.ignore-parse-errors`.
    metrics: Arc<weir_runtime::JobMetrics>,
    /// See [`FileSourceFactory::constants`].
    constants: Arc<std::collections::HashMap<String, Vec<arrow::array::ArrayRef>>>,
}

/// What a metadata column of the filesystem source holds (Flink's keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileMetadata {
    Path,
    Name,
    Size,
    ModificationTime,
    /// The `k`-th value the source was given for the file (see
    /// [`FileSourceFactory::of_files`]).
    Column(usize),
}

impl FileMetadata {
    const KEYS: &[&str] = &[
        "file.path",
        "file.name",
        "file.size",
        "file.modification-time",
    ];

    fn from_key(key: &str) -> Option<Self> {
        Some(match key {
            "file.path" => FileMetadata::Path,
            "file.name" => FileMetadata::Name,
            "file.size" => FileMetadata::Size,
            "file.modification-time" => FileMetadata::ModificationTime,
            _ => return None,
        })
    }

    /// The value for a file, as one row of its natural type (STRING, BIGINT,
    /// TIMESTAMP_LTZ(3)).
    fn value(
        self,
        shown: &str,
        meta: &object_store::ObjectMeta,
        constants: Option<&Vec<arrow::array::ArrayRef>>,
    ) -> Result<arrow::array::ArrayRef> {
        use arrow::array::{Int64Array, StringArray, TimestampMillisecondArray};
        Ok(match self {
            FileMetadata::Column(k) => constants
                .and_then(|c| c.get(k))
                .cloned()
                .ok_or_else(|| Error::internal(format!("no value {k} for '{shown}'")))?,
            FileMetadata::Path => Arc::new(StringArray::from(vec![shown])),
            FileMetadata::Name => Arc::new(StringArray::from(vec![
                shown.rsplit('/').next().unwrap_or(shown),
            ])),
            FileMetadata::Size => Arc::new(Int64Array::from(vec![meta.size as i64])),
            FileMetadata::ModificationTime => Arc::new(
                TimestampMillisecondArray::from(vec![meta.last_modified.timestamp_millis()])
                    .with_timezone("+00:00"),
            ),
        })
    }
}

impl FileSource {
    /// A decoded batch with the metadata columns put in their places.
    fn with_metadata(
        &self,
        batch: &RecordBatch,
        shown: &str,
        meta: &object_store::ObjectMeta,
        constants: Option<&Vec<arrow::array::ArrayRef>>,
    ) -> Result<RecordBatch> {
        let rows = batch.num_rows();
        crate::metadata::place(&self.schema, &self.metadata, batch, |what| {
            let one = what.value(shown, meta, constants)?;
            Ok(arrow::compute::take(
                &one,
                &arrow::array::UInt32Array::from(vec![0; rows]),
                None,
            )?)
        })
    }
}

#[async_trait]
impl Source for FileSource {
    async fn poll_next(&mut self) -> Result<SourcePoll> {
        loop {
            if !self.current.is_empty() {
                return self.next_loaded();
            }
            let Some(split) = self.splits.front().cloned() else {
                match self.monitor.as_mut() {
                    None => return Ok(SourcePoll::Finished),
                    Some(m) => match m.scan(self.store.as_ref(), &mut self.splits).await? {
                        Some(wait) => return Ok(SourcePoll::Idle(wait)),
                        None => continue,
                    },
                }
            };
            if let Some(delay) = weir_common::failpoint_delay("before-file-read") {
                tokio::time::sleep(delay).await;
            }
            // The split holds the object's path as the store writes it (escaped).
            let path = Path::parse(split.file.as_str())
                .unwrap_or_else(|_| Path::from(split.file.as_str()));
            let shown = format!("{}{}", self.shown_root, split.file);
            let read_error =
                |e: object_store::Error| Error::input(format!("cannot read '{shown}': {e}"));
            let file = self.store.get(&path).await.map_err(read_error)?;
            let meta = file.meta.clone();
            let bytes = file.bytes().await.map_err(read_error)?;
            let mut decoded = self.format.decode(&shown, bytes, &self.physical)?;
            if !self.metadata.is_empty() {
                let constants = self.constants.get(&split.file);
                for batch in &mut decoded.batches {
                    *batch = self.with_metadata(batch, &shown, &meta, constants)?;
                }
            }
            if decoded.skipped.count > 0 && split.rows == 0 {
                // Counted once per file (a restore re-reads a file it had started).
                self.metrics.count_records_in_errors(decoded.skipped.count);
                tracing::warn!(
                    "'{shown}': skipped {} bad record(s) or field(s) (ignore-parse-errors), first: {}",
                    decoded.skipped.count,
                    decoded.skipped.first.as_deref().unwrap_or("?")
                );
            }
            let mut batches: VecDeque<RecordBatch> = decoded.batches.into();
            // Skip what an earlier attempt already emitted.
            let mut skip = split.rows as usize;
            while skip > 0 {
                let Some(b) = batches.pop_front() else { break };
                if b.num_rows() <= skip {
                    skip -= b.num_rows();
                } else {
                    batches.push_front(b.slice(skip, b.num_rows() - skip));
                    skip = 0;
                }
            }
            if batches.iter().all(|b| b.num_rows() == 0) {
                self.split_done();
                continue;
            }
            self.current = batches;
        }
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        let mut items: Vec<serde_json::Value> = self
            .splits
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?;
        let Some(m) = &self.monitor else {
            return Ok(OperatorState::new(StateDistribution::RoundRobin, items));
        };
        for file in &m.done {
            items.push(serde_json::to_value(FileSplit {
                file: file.clone(),
                rows: 0,
                done: true,
            })?);
        }
        Ok(OperatorState::new(StateDistribution::Union, items))
    }
}

impl Monitor {
    /// Lists the folder when the interval has passed and queues this subtask's new
    /// files. Returns how long to wait when there is nothing to read. Cancel-safe: the
    /// queue changes only after the listing completed.
    async fn scan(
        &mut self,
        store: &dyn ObjectStore,
        splits: &mut VecDeque<FileSplit>,
    ) -> Result<Option<Duration>> {
        let now = Instant::now();
        if now < self.next_scan {
            return Ok(Some(self.next_scan - now));
        }
        let files = list_files(store, &self.root, &self.location).await?;
        self.next_scan = Instant::now() + self.interval;
        for file in files {
            let file = file.to_string();
            if owner(&file, self.parallelism) == self.subtask
                && !self.done.contains(&file)
                && !splits.iter().any(|s| s.file == file)
            {
                splits.push_back(FileSplit {
                    file,
                    rows: 0,
                    done: false,
                });
            }
        }
        Ok(splits.is_empty().then_some(self.interval))
    }
}

impl FileSource {
    /// Emits the next decoded batch; the split is done when its last batch is out.
    fn next_loaded(&mut self) -> Result<SourcePoll> {
        let batch = self.current.pop_front().expect("non-empty");
        self.splits[0].rows += batch.num_rows() as u64;
        if self.current.is_empty() {
            self.split_done();
        }
        Ok(SourcePoll::Batch(batch))
    }

    /// The first split is read completely.
    fn split_done(&mut self) {
        if let Some(split) = self.splits.pop_front()
            && let Some(m) = self.monitor.as_mut()
        {
            m.done.insert(split.file);
        }
    }
}
