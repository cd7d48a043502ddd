//! Bounded file source: a file or a folder (recursively; names starting with `.` or `_`
//! are skipped) of Parquet, CSV or JSON files. Each file is a split; a split's position
//! is the number of rows already emitted, so a restore resumes mid-file.

use super::format::Format;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::Arc;
use weir_common::{CheckpointId, ConnectorOptions, Error, Result};
use weir_runtime::storage::resolve;
use weir_runtime::{OperatorState, Source, SourceFactory, SourcePoll, StateDistribution, TaskInfo};

pub struct FileSourceFactory {
    schema: SchemaRef,
    format: Format,
    store: Arc<dyn ObjectStore>,
    location: String,
    files: Vec<Path>,
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

impl FileSourceFactory {
    pub async fn try_new(options: &ConnectorOptions, schema: SchemaRef) -> Result<Self> {
        options.check_known("filesystem", super::SOURCE_OPTIONS)?;
        if options.get("source.monitor-interval").is_some() {
            return Err(Error::config(format!(
                "table '{}': 'source.monitor-interval' (continuous file monitoring) is not supported yet; \
                 the filesystem source reads the files present when the job starts",
                options.table
            )));
        }
        let format = Format::from_options(options)?;
        let location = options.required("path")?.to_string();
        let resolved = resolve(&location, false, &super::s3_settings(options))?;
        let (store, root) = (resolved.store, resolved.path);
        let files = match store.head(&root).await {
            Ok(meta) => vec![meta.location],
            Err(_) => {
                let mut files: Vec<Path> = store
                    .list(Some(&root))
                    .map_ok(|m| m.location)
                    .try_collect::<Vec<_>>()
                    .await
                    .map_err(|e| Error::input(format!("cannot list '{location}': {e}")))?
                    .into_iter()
                    .filter(|p| !is_hidden(p, &root))
                    .collect();
                files.sort();
                files
            }
        };
        if files.is_empty() {
            return Err(Error::input(format!(
                "table '{}': path '{location}' does not exist or holds no files",
                options.table
            )));
        }
        Ok(Self {
            schema,
            format,
            store,
            location,
            files,
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct FileSplit {
    file: String,
    /// Rows of this file already emitted.
    rows: u64,
}

impl SourceFactory for FileSourceFactory {
    fn name(&self) -> String {
        format!(
            "Source: filesystem ({}, {} files)",
            self.location,
            self.files.len()
        )
    }
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn is_bounded(&self) -> bool {
        true
    }
    fn create(&self, task: &TaskInfo, restored: Option<OperatorState>) -> Result<Box<dyn Source>> {
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
                })
                .collect(),
        };
        Ok(Box::new(FileSource {
            schema: self.schema.clone(),
            format: self.format,
            store: self.store.clone(),
            splits,
            current: VecDeque::new(),
        }))
    }
}

struct FileSource {
    schema: SchemaRef,
    format: Format,
    store: Arc<dyn ObjectStore>,
    /// Unfinished splits; the first one is being read.
    splits: VecDeque<FileSplit>,
    /// Decoded batches of the first split not yet emitted.
    current: VecDeque<RecordBatch>,
}

#[async_trait]
impl Source for FileSource {
    async fn poll_next(&mut self) -> Result<SourcePoll> {
        loop {
            if !self.current.is_empty() {
                return self.next_loaded();
            }
            let Some(split) = self.splits.front().cloned() else {
                return Ok(SourcePoll::Finished);
            };
            let path = Path::from(split.file.as_str());
            let read_error =
                |e: object_store::Error| Error::input(format!("cannot read '{}': {e}", split.file));
            let bytes = self
                .store
                .get(&path)
                .await
                .map_err(read_error)?
                .bytes()
                .await
                .map_err(read_error)?;
            let mut batches: VecDeque<RecordBatch> =
                self.format.decode(&split.file, bytes, &self.schema)?.into();
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
                self.splits.pop_front();
                continue;
            }
            self.current = batches;
        }
    }

    fn snapshot_state(&mut self, _: CheckpointId) -> Result<OperatorState> {
        let items = self
            .splits
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?;
        Ok(OperatorState::new(StateDistribution::RoundRobin, items))
    }
}

impl FileSource {
    /// Emits the next decoded batch; the split is done when its last batch is out.
    fn next_loaded(&mut self) -> Result<SourcePoll> {
        let batch = self.current.pop_front().expect("non-empty");
        self.splits[0].rows += batch.num_rows() as u64;
        if self.current.is_empty() {
            self.splits.pop_front();
        }
        Ok(SourcePoll::Batch(batch))
    }
}
