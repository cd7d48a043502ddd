//! Exactly-once file sink (two-phase commit) on any `object_store`.
//!
//! * A subtask encodes rows into an in-memory part. The part is rolled when it reaches
//!   `sink.rolling-policy.file-size`, when it is older than
//!   `sink.rolling-policy.rollover-interval`, and always at a checkpoint.
//! * Rolling uploads the part as a hidden *pending* object `.part-<attempt>-<subtask>-<n>.<ext>.pending`
//!   in the target folder; readers (Spark, DataFusion, Weir) ignore names that start with `.`.
//! * The committable `{pending, final, size}` is stored in the checkpoint. Committing renames
//!   the pending object to its final name `part-<attempt>-<subtask>-<n>.<ext>` — an atomic
//!   rename on a local file system; copy then delete on object stores. A final object that
//!   already exists with the expected size means "already committed".
//! * After a restore, pending objects of earlier attempts that no checkpoint references
//!   are deleted: their rows are replayed from the restored source positions.

use super::format::{Format, PartEncoder};
use crate::two_phase::{Committable, Committer, SinkWriter, TwoPhaseCommitSink};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_common::{ConnectorOptions, Error, Result};
use weir_runtime::TaskInfo;
use weir_runtime::storage::resolve_location;

/// The filesystem sink of one table.
pub struct FileSink {
    schema: SchemaRef,
    format: Format,
    store: Arc<dyn ObjectStore>,
    root: Path,
    location: String,
    file_size: u64,
    rollover: Duration,
}

impl FileSink {
    /// Validates the options and checks that the target is writable before any data moves.
    pub async fn try_new(options: &ConnectorOptions, schema: SchemaRef) -> Result<Self> {
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
        let (store, root) = resolve_location(&location).map_err(|e| {
            Error::config(format!(
                "table '{}': cannot write to '{location}': {e}",
                options.table
            ))
        })?;
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
        Ok(Self {
            schema,
            format,
            store,
            root,
            location,
            file_size,
            rollover,
        })
    }
}

impl TwoPhaseCommitSink for FileSink {
    fn name(&self) -> String {
        format!(
            "Sink: filesystem ({}, {})",
            self.location,
            self.format.extension()
        )
    }

    fn create_writer(&self, task: &TaskInfo) -> Result<Box<dyn SinkWriter>> {
        Ok(Box::new(FileWriter {
            schema: self.schema.clone(),
            format: self.format,
            store: self.store.clone(),
            root: self.root.clone(),
            prefix: format!("part-{}-{}-", task.attempt.simple(), task.subtask),
            counter: 0,
            current: None,
            ready: Vec::new(),
            file_size: self.file_size,
            rollover: self.rollover,
        }))
    }

    fn committer(&self) -> Arc<dyn Committer> {
        Arc::new(FileCommitter {
            store: self.store.clone(),
            root: self.root.clone(),
        })
    }
}

struct OpenPart {
    encoder: PartEncoder,
    opened: Instant,
    rows: usize,
}

struct FileWriter {
    schema: SchemaRef,
    format: Format,
    store: Arc<dyn ObjectStore>,
    root: Path,
    prefix: String,
    counter: u64,
    current: Option<OpenPart>,
    ready: Vec<Committable>,
    file_size: u64,
    rollover: Duration,
}

impl FileWriter {
    /// Closes the open part and uploads it as a pending object.
    async fn roll(&mut self) -> Result<()> {
        let Some(part) = self.current.take() else {
            return Ok(());
        };
        if part.rows == 0 {
            return Ok(());
        }
        let bytes = part.encoder.finish()?;
        let name = format!(
            "{}{}.{}",
            self.prefix,
            self.counter,
            self.format.extension()
        );
        self.counter += 1;
        let pending = self.root.clone().join(format!(".{name}.pending"));
        let size = bytes.len();
        self.store.put(&pending, PutPayload::from(bytes)).await?;
        weir_common::failpoint("after-pending-upload");
        self.ready.push(serde_json::json!({
            "pending": pending.to_string(),
            "final": self.root.clone().join(name).to_string(),
            "size": size,
        }));
        Ok(())
    }
}

#[async_trait]
impl SinkWriter for FileWriter {
    async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        if self.current.is_none() {
            self.current = Some(OpenPart {
                encoder: PartEncoder::new(self.format, &self.schema)?,
                opened: Instant::now(),
                rows: 0,
            });
        }
        let part = self.current.as_mut().expect("open part");
        part.encoder.write(&batch)?;
        part.rows += batch.num_rows();
        if part.encoder.size() as u64 >= self.file_size || part.opened.elapsed() >= self.rollover {
            self.roll().await?;
        }
        Ok(())
    }

    async fn prepare_commit(&mut self) -> Result<Vec<Committable>> {
        self.roll().await?;
        Ok(std::mem::take(&mut self.ready))
    }
}

struct FileCommitter {
    store: Arc<dyn ObjectStore>,
    root: Path,
}

fn field<'a>(c: &'a Committable, key: &str) -> Result<&'a str> {
    c.get(key)
        .and_then(|v| v.as_str())
        .ok_or_else(|| Error::Checkpoint(format!("file committable without '{key}': {c}")))
}

#[async_trait]
impl Committer for FileCommitter {
    async fn commit(&self, c: &Committable) -> Result<()> {
        let pending = Path::from(field(c, "pending")?);
        let target = Path::from(field(c, "final")?);
        let size = c.get("size").and_then(|v| v.as_u64()).unwrap_or(0);
        match self.store.head(&target).await {
            Ok(meta) if meta.size == size => return Ok(()), // already committed
            Ok(meta) => {
                return Err(Error::external(format!(
                    "cannot commit '{target}': a file of {} bytes is already there (expected {size}); not overwriting it",
                    meta.size
                )));
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        weir_common::failpoint("commit-before-rename");
        match self.store.rename(&pending, &target).await {
            Ok(()) => {
                weir_common::failpoint("commit-after-rename");
                Ok(())
            }
            Err(object_store::Error::NotFound { .. }) => match self.store.head(&target).await {
                Ok(meta) if meta.size == size => Ok(()),
                _ => Err(Error::external(format!(
                    "cannot commit '{target}': its pending file '{pending}' is gone"
                ))),
            },
            Err(e) => Err(e.into()),
        }
    }

    async fn abort_stale(&self, task: &TaskInfo, recovered: &[Committable]) -> Result<()> {
        let current = task.attempt.simple().to_string();
        let listing = self.store.list_with_delimiter(Some(&self.root)).await?;
        for obj in listing.objects {
            let Some(name) = obj.location.filename() else {
                continue;
            };
            let stale = name.starts_with(".part-")
                && name.ends_with(".pending")
                && !name.contains(&current)
                && !recovered
                    .iter()
                    .any(|c| field(c, "pending").ok() == Some(obj.location.as_ref()));
            if stale {
                tracing::info!(
                    "removing uncommitted part '{}' of an earlier attempt",
                    obj.location
                );
                self.store.delete(&obj.location).await?;
            }
        }
        Ok(())
    }
}
