//! The exactly-once Delta sink.
//!
//! Writers are the filesystem sink's Parquet writers: each subtask writes parts into the
//! table's folder (Hive-style partition folders for `PARTITIONED BY` columns, which the
//! files leave out) and pre-commits them at every barrier. Instead of committing them
//! itself, it sends the committables to the table's one committer (parallelism 1, Flink's
//! global committer). When a checkpoint completes, the committer publishes the parts and
//! commits one Delta transaction holding every subtask's files (`add` actions) and an
//! application transaction (`txn`: app id `weir-<lineage>-<run>-<sink>`, the run fixed
//! when the job starts from scratch and kept by its restores; version the checkpoint id).
//! A re-commit after a restore reads that version back from the table and skips what it
//! already holds, so no Delta version is ever committed twice. Readers see only the
//! table's snapshots: parts not yet in the log are invisible to them.

use super::{OPTIONS, delta_error, has_log, log_store, schema_differences};
use crate::filesystem::FileSink;
use crate::two_phase::{
    Committable, Committer, GlobalCommitSink, GlobalCommitter, SinkWriter, TwoPhaseCommitSink,
};
use arrow::datatypes::{DataType, SchemaRef};
use async_trait::async_trait;
use deltalake_core::kernel::engine::arrow_conversion::TryIntoKernel;
use deltalake_core::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake_core::kernel::{Action, Add, Remove, StructType, Transaction};
use deltalake_core::logstore::LogStoreRef;
use deltalake_core::operations::create::CreateBuilder;
use deltalake_core::protocol::{DeltaOperation, SaveMode};
use deltalake_core::{DeltaTable, DeltaTableError};
use object_store::ObjectStore;
use object_store::path::Path;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use weir_common::{CheckpointId, ConnectorOptions, Error, Result};
use weir_runtime::TaskInfo;

/// The Delta sink of one table.
pub struct DeltaSink {
    files: FileSink,
    table: Arc<TableRef>,
}

/// Where the table is, and what a commit needs to know about it.
pub(super) struct TableRef {
    /// The table's name in the script, for messages.
    pub(super) name: String,
    /// The table's `path`, for messages.
    pub(super) location: String,
    pub(super) log_store: LogStoreRef,
    /// The table's folder in `store`.
    pub(super) root: Path,
    pub(super) partitioned_by: Vec<String>,
    /// Arrow types of the partition columns, to write their values as Delta does.
    pub(super) partition_types: HashMap<String, DataType>,
    /// `INSERT OVERWRITE` (batch): the commit replaces the table's files (of the
    /// partitions written, for a partitioned table).
    pub(super) overwrite: bool,
    /// `auto-compaction`: the target size of files compacted after each commit.
    pub(super) compaction: Option<u64>,
    /// The store (`root` is the table's folder in it).
    pub(super) store: Arc<dyn ObjectStore>,
}

impl DeltaSink {
    /// Opens the table at `path`, or creates it with the table's columns; an existing
    /// table must have the same columns and partition columns.
    pub async fn try_new(
        options: &ConnectorOptions,
        schema: SchemaRef,
        partitioned_by: &[String],
        overwrite: bool,
    ) -> Result<Self> {
        options.check_known("delta", OPTIONS)?;
        let location = options.required("path")?.to_string();
        let compaction = match options.get_bool("auto-compaction")?.unwrap_or(false) {
            false => None,
            true => Some(match options.get_memory_size("compaction.file-size")? {
                Some(size) => size,
                None => options
                    .get_memory_size("sink.rolling-policy.file-size")?
                    .unwrap_or(128 << 20),
            }),
        };
        // The parts are the filesystem sink's Parquet parts, in the table's folder.
        let mut file_options: BTreeMap<String, String> = options
            .values
            .iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "connector" | "auto-compaction" | "compaction.file-size"
                )
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        file_options.insert("connector".into(), "filesystem".into());
        file_options.insert("format".into(), "parquet".into());
        let file_options = ConnectorOptions::new(options.table.clone(), file_options);
        let files = FileSink::try_new(&file_options, schema.clone(), partitioned_by).await?;
        let (store, root, local) = files.storage();
        let log_store = log_store(&store, &root, local.as_deref(), &location)?;
        let partition_types = partitioned_by
            .iter()
            .filter_map(|c| {
                let field = schema.field_with_name(c).ok()?;
                Some((c.clone(), field.data_type().clone()))
            })
            .collect();
        let table = TableRef {
            name: options.table.clone(),
            location,
            log_store,
            root,
            partitioned_by: partitioned_by.to_vec(),
            partition_types,
            overwrite,
            compaction,
            store,
        };
        table.open_or_create(&schema).await?;
        Ok(Self {
            files,
            table: Arc::new(table),
        })
    }
}

impl TableRef {
    pub(super) fn error(&self, e: DeltaTableError) -> Error {
        delta_error(&self.name, &self.location, e)
    }

    /// The table as it is now (its latest version).
    async fn load(&self) -> Result<DeltaTable> {
        let mut table = DeltaTable::new(self.log_store.clone());
        table.load().await.map_err(|e| self.error(e))?;
        Ok(table)
    }

    /// Checks the existing table against `schema` and the partition columns, or creates
    /// the table when its folder holds none.
    async fn open_or_create(&self, schema: &SchemaRef) -> Result<()> {
        let wanted: StructType = schema.as_ref().try_into_kernel().map_err(|e| {
            Error::config(format!(
                "table '{}': a column's type has no Delta equivalent: {e}",
                self.name
            ))
        })?;
        let mut table = DeltaTable::new(self.log_store.clone());
        let found = match has_log(self.store.as_ref(), &self.root).await? {
            false => Err(DeltaTableError::NotATable(self.location.clone())),
            true => table.load().await,
        };
        match found {
            Ok(()) => {}
            Err(DeltaTableError::NotATable(_)) => {
                let created = CreateBuilder::new()
                    .with_log_store(self.log_store.clone())
                    .with_table_name(self.name.clone())
                    .with_columns(wanted.fields().cloned())
                    .with_partition_columns(self.partitioned_by.clone())
                    .with_save_mode(SaveMode::ErrorIfExists)
                    .await;
                match created {
                    Ok(_) => return Ok(()),
                    // Another writer created it meanwhile: check theirs.
                    Err(_) => table.load().await.map_err(|e| self.error(e))?,
                }
            }
            Err(e) => return Err(self.error(e)),
        }
        let snapshot = table.snapshot().map_err(|e| self.error(e))?;
        let mut problems = schema_differences(&snapshot.schema(), &wanted, true);
        let partitions = snapshot.metadata().partition_columns();
        if partitions != self.partitioned_by.as_slice() {
            problems.push(format!(
                "the table is partitioned by [{}], the DDL by [{}]",
                partitions.join(", "),
                self.partitioned_by.join(", ")
            ));
        }
        if problems.is_empty() {
            return Ok(());
        }
        Err(Error::config(format!(
            "table '{}': the Delta table at '{}' does not match its declaration: {}",
            self.name,
            self.location,
            problems.join("; ")
        )))
    }

    /// The `add` action of the part `c` published at `target` ([`published_path`]).
    fn add_action(&self, target: &Path, c: &Committable, now_ms: i64) -> Result<Add> {
        let parts: Vec<String> = target
            .prefix_match(&self.root)
            .ok_or_else(|| {
                Error::Checkpoint(format!(
                    "'{target}' is not in the Delta table's folder '{}'",
                    self.root
                ))
            })?
            .map(|p| p.as_ref().to_string())
            .collect();
        let mut partition_values = HashMap::new();
        for folder in &parts[..parts.len().saturating_sub(1)] {
            let decoded = percent_encoding::percent_decode_str(folder)
                .decode_utf8_lossy()
                .to_string();
            let Some((column, value)) = decoded.split_once('=') else {
                continue;
            };
            partition_values.insert(column.to_string(), self.partition_value(column, value));
        }
        // The object's path relative to the table's root, as it is named in the store
        // (characters a folder name cannot hold, `/` among them, are escaped there as
        // Hive escapes them); the action escapes it once more as a URI.
        let path = parts.join("/");
        Ok(Add {
            path,
            partition_values,
            size: c.get("size").and_then(|v| v.as_i64()).unwrap_or(0),
            modification_time: now_ms,
            data_change: true,
            // Statistics hold the row count only (no min/max values yet).
            stats: c
                .get("rows")
                .and_then(|v| v.as_u64())
                .map(|rows| serde_json::json!({ "numRecords": rows }).to_string()),
            ..Default::default()
        })
    }

    /// A partition value as Delta writes it, from the partition folder's: `None` for
    /// NULL (the filesystem sink's `__DEFAULT_PARTITION__` folder), timestamps with a
    /// space between date and time.
    fn partition_value(&self, column: &str, value: &str) -> Option<String> {
        if value == "__DEFAULT_PARTITION__" {
            return None;
        }
        match self.partition_types.get(column) {
            Some(DataType::Timestamp(..)) => Some(value.replacen('T', " ", 1)),
            _ => Some(value.to_string()),
        }
    }
}

#[async_trait]
impl GlobalCommitSink for DeltaSink {
    fn name(&self) -> String {
        format!(
            "Sink: delta ({})",
            weir_runtime::storage::display_location(&self.table.location)
        )
    }

    fn create_writer(&self, task: &TaskInfo) -> Result<Box<dyn SinkWriter>> {
        self.files.create_writer(task)
    }

    fn committer(&self) -> Arc<dyn GlobalCommitter> {
        Arc::new(DeltaCommitter {
            files: self.files.committer(),
            table: self.table.clone(),
            cached: Default::default(),
        })
    }

    async fn earlier_output(&self, task: &TaskInfo) -> Result<Option<String>> {
        self.files.earlier_output(task).await
    }
}

pub(super) struct DeltaCommitter {
    /// Publishes the parts (renames a pending file, completes an S3 upload).
    files: Arc<dyn Committer>,
    pub(super) table: Arc<TableRef>,
    /// The table as the last commit left it, brought up to date with the versions
    /// committed since (by anyone) rather than read whole again; dropped on an error.
    cached: tokio::sync::Mutex<Option<DeltaTable>>,
}

/// The writers' subtask, as seen from the committer's: their parts are named after
/// their vertex.
fn writers_task(task: &TaskInfo) -> TaskInfo {
    TaskInfo {
        vertex_uid: weir_runtime::writers_uid(&task.vertex_uid).to_string(),
        ..task.clone()
    }
}

/// The application id of the `txn` actions of a committer's run (see
/// [`GlobalCommitter::commit`]).
fn app_id(run: &str) -> String {
    format!("weir-{run}")
}

#[async_trait]
impl GlobalCommitter for DeltaCommitter {
    fn name(&self) -> String {
        "Committer: delta".to_string()
    }

    async fn commit(
        &self,
        run: &str,
        checkpoints: &[(CheckpointId, Vec<Committable>)],
    ) -> Result<()> {
        // When the commit was taken up: the `txn` action's `lastUpdated` and the files'
        // modification time.
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut cached = self.cached.lock().await;
        let table = match cached.take() {
            Some(mut table) => {
                table
                    .update_incremental(None)
                    .await
                    .map_err(|e| self.table.error(e))?;
                table
            }
            None => self.table.load().await?,
        };
        let snapshot = table.snapshot().map_err(|e| self.table.error(e))?;
        let app = app_id(run);
        let done = snapshot
            .transaction_version(table.log_store().as_ref(), &app)
            .await
            .map_err(|e| self.table.error(e))?
            .unwrap_or(-1);
        let todo: Vec<&(CheckpointId, Vec<Committable>)> = checkpoints
            .iter()
            .filter(|(id, _)| id.0 as i64 > done)
            .collect();
        let Some((last, _)) = todo.last() else {
            tracing::debug!(app, done, "Delta table already holds these checkpoints");
            *cached = Some(table);
            return Ok(());
        };
        let mut actions = Vec::new();
        let mut published = Vec::new();
        for (_, committables) in &todo {
            for c in committables {
                self.files.commit(c).await?;
                let target = published_path(c)?;
                let add = self.table.add_action(&target, c, now_ms)?;
                published.push((target, add.clone()));
                actions.push(Action::Add(add));
            }
        }
        if self.table.overwrite {
            actions.extend(self.replaced(snapshot, &actions, now_ms));
        }
        weir_common::failpoint("delta-before-commit")?;
        let mode = match self.table.overwrite {
            true => SaveMode::Overwrite,
            false => SaveMode::Append,
        };
        let operation = DeltaOperation::Write {
            mode,
            partition_by: (!self.table.partitioned_by.is_empty())
                .then(|| self.table.partitioned_by.clone()),
            predicate: None,
        };
        let properties = CommitProperties::default().with_application_transaction(
            Transaction::new_with_last_update(&app, last.0 as i64, Some(now_ms)),
        );
        let committed = CommitBuilder::from(properties)
            .with_actions(actions)
            .build(Some(snapshot), table.log_store(), operation)
            .await
            .map_err(|e| self.table.error(e))?;
        tracing::info!(
            table = %self.table.name,
            version = committed.version(),
            checkpoint = last.0,
            "committed to the Delta table"
        );
        weir_common::failpoint("delta-after-commit")?;
        if let Some(target) = self.table.compaction {
            // Best effort: the data is committed either way.
            let snapshot = committed.snapshot();
            if let Err(e) = self.compact(&snapshot, published, target, now_ms).await {
                tracing::warn!(table = %self.table.name, error = %e, "auto-compaction skipped");
            }
        }
        *cached = Some(table);
        Ok(())
    }

    async fn abort_stale(&self, task: &TaskInfo, recovered: &[Committable]) -> Result<()> {
        self.files.abort_stale(&writers_task(task), recovered).await
    }
}

/// The object a committable published.
fn published_path(c: &Committable) -> Result<Path> {
    let target = c
        .get("final")
        .and_then(|v| v.as_str())
        .ok_or_else(|| Error::Checkpoint(format!("Delta committable without a file: {c}")))?;
    Path::parse(target).map_err(|e| Error::Checkpoint(e.to_string()))
}

impl DeltaCommitter {
    /// For `INSERT OVERWRITE`: `remove` actions for the table's files that the new ones
    /// replace (all of them, or those of the partitions written).
    fn replaced(
        &self,
        snapshot: &deltalake_core::table::state::DeltaTableState,
        adds: &[Action],
        now_ms: i64,
    ) -> Vec<Action> {
        let written: Vec<&HashMap<String, Option<String>>> = adds
            .iter()
            .filter_map(|a| match a {
                Action::Add(add) => Some(&add.partition_values),
                _ => None,
            })
            .collect();
        let partitioned = !self.table.partitioned_by.is_empty();
        snapshot
            .log_data()
            .iter()
            .filter(|file| !partitioned || written.contains(&&file.partition_values_map()))
            .map(|file| {
                Action::Remove(Remove {
                    path: file.path().to_string(),
                    data_change: true,
                    deletion_timestamp: Some(now_ms),
                    extended_file_metadata: Some(true),
                    partition_values: Some(file.partition_values_map()),
                    size: Some(file.size()),
                    ..Default::default()
                })
            })
            .collect()
    }
}
