//! `'connector' = 'delta'`: an exactly-once sink into a Delta Lake table, on the local
//! file system or S3, through the `deltalake` crates.
//!
//! Writers are the filesystem sink's Parquet writers: each subtask writes parts into the
//! table's folder (Hive-style partition folders for `PARTITIONED BY` columns, which the
//! files leave out) and pre-commits them at every barrier. Instead of committing them
//! itself, it sends the committables to the table's one committer (parallelism 1, Flink's
//! global committer). When a checkpoint completes, the committer publishes the parts and
//! commits one Delta transaction holding every subtask's files (`add` actions) and an
//! application transaction (`txn`: app id `weir-<lineage>-<run>-<sink>`, fixed when the job starts from scratch and kept by its restores, version the
//! checkpoint id). A re-commit after a restore reads that version back from the table
//! and skips what it already holds, so no Delta version is ever committed twice. Readers
//! see only the table's snapshots: parts not yet in the log are invisible to them.

use crate::filesystem::FileSink;
use crate::two_phase::{
    Committable, Committer, GlobalCommitSink, GlobalCommitter, SinkWriter, TwoPhaseCommitSink,
};
use arrow::datatypes::{DataType, SchemaRef};
use async_trait::async_trait;
use deltalake_core::kernel::engine::arrow_conversion::TryIntoKernel;
use deltalake_core::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake_core::kernel::{Action, Add, Remove, StructType, Transaction};
use deltalake_core::logstore::{LogStoreRef, StorageConfig};
use deltalake_core::operations::create::CreateBuilder;
use deltalake_core::protocol::{DeltaOperation, SaveMode};
use deltalake_core::{DeltaTable, DeltaTableError};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use weir_common::{CheckpointId, ConnectorOptions, Error, Result};
use weir_runtime::TaskInfo;

/// The options of a Delta table read as a source.
pub const SOURCE_OPTIONS: &[&str] = &[
    "connector",
    "path",
    "s3.access-key",
    "s3.secret-key",
    "s3.endpoint",
    "s3.region",
    "s3.retry.timeout",
];

/// The options of a Delta table written as a sink.
pub const OPTIONS: &[&str] = &[
    "connector",
    "path",
    "sink.rolling-policy.file-size",
    "sink.rolling-policy.rollover-interval",
    "sink.rolling-policy.check-interval",
    "auto-compaction",
    "compaction.file-size",
    "s3.access-key",
    "s3.secret-key",
    "s3.endpoint",
    "s3.region",
    "s3.retry.timeout",
];

/// The Delta sink of one table.
pub struct DeltaSink {
    files: FileSink,
    table: Arc<TableRef>,
}

/// Where the table is, and what a commit needs to know about it.
struct TableRef {
    /// The table's name in the script, for messages.
    name: String,
    /// The table's `path`, for messages.
    location: String,
    log_store: LogStoreRef,
    /// The table's folder in `store`.
    root: Path,
    partitioned_by: Vec<String>,
    /// Arrow types of the partition columns, to write their values as Delta does.
    partition_types: HashMap<String, DataType>,
    /// `INSERT OVERWRITE` (batch): the commit replaces the table's files (of the
    /// partitions written, for a partitioned table).
    overwrite: bool,
    /// `auto-compaction`: the target size of files compacted after each commit.
    compaction: Option<u64>,
    /// The store (`root` is the table's folder in it).
    store: Arc<dyn ObjectStore>,
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

/// The Delta log of the table in `root` of `store` (`local`: its folder on disk).
fn log_store(
    store: &Arc<dyn ObjectStore>,
    root: &Path,
    local: Option<&std::path::Path>,
    location: &str,
) -> Result<LogStoreRef> {
    let url = match local {
        Some(dir) => url::Url::from_directory_path(dir)
            .map_err(|_| Error::config(format!("invalid Delta table path '{location}'")))?,
        None => url::Url::parse(location)
            .map_err(|e| Error::config(format!("invalid Delta table path '{location}': {e}")))?,
    };
    let prefixed: Arc<dyn ObjectStore> = Arc::new(object_store::prefix::PrefixStore::new(
        store.clone(),
        root.clone(),
    ));
    Ok(deltalake_core::logstore::default_logstore(
        prefixed,
        store.clone(),
        &url,
        &StorageConfig::default(),
    ))
}

/// Whether `root` holds a Delta log (asked before loading: the kernel logs an error
/// when it finds none).
async fn has_log(store: &dyn ObjectStore, root: &Path) -> Result<bool> {
    let log = store
        .list_with_delimiter(Some(&root.clone().join("_delta_log")))
        .await?;
    Ok(!log.objects.is_empty())
}

/// How the columns `wanted` (the DDL's) differ from the table's `existing` ones; with
/// `all`, columns of the table the DDL lacks count too (a sink writes every column, a
/// source may read some).
fn schema_differences(existing: &StructType, wanted: &StructType, all: bool) -> Vec<String> {
    let mut problems = Vec::new();
    for field in wanted.fields() {
        match existing.field(field.name()) {
            None => problems.push(format!("column '{}' is missing", field.name())),
            Some(f) if f.data_type() != field.data_type() => problems.push(format!(
                "column '{}' is {} in the table, {} in the DDL",
                field.name(),
                delta_type_name(f.data_type()),
                delta_type_name(field.data_type())
            )),
            Some(_) => {}
        }
    }
    if all {
        for field in existing.fields() {
            if wanted.field(field.name()).is_none() {
                problems.push(format!(
                    "the table has column '{}', which the DDL lacks",
                    field.name()
                ));
            }
        }
    }
    problems
}

/// The source of a Delta table: a bounded read of its latest snapshot. Its data files
/// are read as the filesystem source reads Parquet files (a split per file, resumed
/// mid-file after a restore); partition columns take each file's values from the log.
pub async fn source(
    options: &ConnectorOptions,
    schema: SchemaRef,
) -> Result<crate::filesystem::FileSourceFactory> {
    options.check_known("delta", SOURCE_OPTIONS)?;
    let location = options.required("path")?.to_string();
    let table_name = options.table.clone();
    let resolved = weir_runtime::storage::resolve(
        &location,
        false,
        &crate::filesystem::s3_settings(options)?,
    )?;
    let (store, root) = (resolved.store, resolved.path);
    if !has_log(store.as_ref(), &root).await? {
        return Err(Error::input(format!(
            "table '{table_name}': '{location}' holds no Delta table (no '_delta_log')"
        )));
    }
    let log_store = log_store(&store, &root, resolved.local.as_deref(), &location)?;
    let mut table = DeltaTable::new(log_store);
    table
        .load()
        .await
        .map_err(|e| delta_error(&table_name, &location, e))?;
    let snapshot = table
        .snapshot()
        .map_err(|e| delta_error(&table_name, &location, e))?;
    let wanted: StructType = schema.as_ref().try_into_kernel().map_err(|e| {
        Error::config(format!(
            "table '{table_name}': a column's type has no Delta equivalent: {e}"
        ))
    })?;
    let problems = schema_differences(&snapshot.schema(), &wanted, false);
    if !problems.is_empty() {
        return Err(Error::config(format!(
            "table '{table_name}': the Delta table at '{location}' does not match its \
             declaration: {}",
            problems.join("; ")
        )));
    }
    let mapping = snapshot
        .metadata()
        .configuration()
        .get("delta.columnMapping.mode");
    if mapping.is_some_and(|m| m != "none") {
        return Err(Error::config(format!(
            "table '{table_name}': the Delta table at '{location}' maps column names \
             ('delta.columnMapping.mode'), which Weir does not read yet"
        )));
    }
    // The partition columns the DDL declares, in the DDL's order.
    let partitions = snapshot.metadata().partition_columns();
    let constant: Vec<(usize, String)> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| partitions.contains(f.name()))
        .map(|(i, f)| (i, f.name().clone()))
        .collect();
    let mut files = Vec::new();
    for file in snapshot.log_data().iter() {
        let relative = file.path().to_string();
        if file.deletion_vector_descriptor().is_some() {
            return Err(Error::config(format!(
                "table '{table_name}': file '{relative}' of the Delta table at '{location}' \
                 has deleted rows (a deletion vector), which Weir does not read yet"
            )));
        }
        let full = format!("{root}/{relative}");
        let path = Path::parse(full.trim_start_matches('/'))
            .map_err(|e| Error::input(format!("table '{table_name}': file '{relative}': {e}")))?;
        let values = file.partition_values_map();
        let mut columns = Vec::new();
        for (i, name) in &constant {
            let value = values.get(name).cloned().flatten();
            let text: arrow::array::ArrayRef =
                Arc::new(arrow::array::StringArray::from(vec![value.clone()]));
            let typed = arrow::compute::cast(&text, schema.field(*i).data_type())?;
            if value.is_some() && typed.is_null(0) {
                return Err(Error::input(format!(
                    "table '{table_name}': file '{relative}' has partition value {name} = \
                     '{}', which is no {}",
                    value.unwrap_or_default(),
                    schema.field(*i).data_type()
                )));
            }
            columns.push(typed);
        }
        files.push((path, columns));
    }
    let constant: Vec<usize> = constant.into_iter().map(|(i, _)| i).collect();
    Ok(crate::filesystem::FileSourceFactory::of_files(
        "delta", schema, store, location, root, &constant, files,
    ))
}

/// A `deltalake` error as Weir's, naming the table.
fn delta_error(table: &str, location: &str, e: DeltaTableError) -> Error {
    Error::external(format!("Delta table '{table}' at '{location}': {e}"))
}

/// Delta's name of a column's type, for messages.
fn delta_type_name(t: &deltalake_core::kernel::DataType) -> String {
    serde_json::to_string(t)
        .map(|s| s.trim_matches('"').to_string())
        .unwrap_or_else(|_| format!("{t:?}"))
}

impl TableRef {
    fn error(&self, e: DeltaTableError) -> Error {
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

    /// The `add` action of a published part.
    fn add_action(&self, c: &Committable, now_ms: i64) -> Result<Add> {
        let target = c
            .get("final")
            .and_then(|v| v.as_str())
            .ok_or_else(|| Error::Checkpoint(format!("Delta committable without a file: {c}")))?;
        let target = Path::parse(target).map_err(|e| Error::Checkpoint(e.to_string()))?;
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
        })
    }

    async fn earlier_output(&self, task: &TaskInfo) -> Result<Option<String>> {
        self.files.earlier_output(task).await
    }
}

struct DeltaCommitter {
    /// Publishes the parts (renames a pending file, completes an S3 upload).
    files: Arc<dyn Committer>,
    table: Arc<TableRef>,
}

/// The writers' subtask: the committer's vertex is theirs with `-committer` added (see
/// the engine's sink vertices). Their parts are named after it.
fn writers_task(task: &TaskInfo) -> TaskInfo {
    let uid = task
        .vertex_uid
        .strip_suffix("-committer")
        .unwrap_or(&task.vertex_uid);
    TaskInfo {
        vertex_uid: uid.to_string(),
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
        let table = self.table.load().await?;
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
            return Ok(());
        };
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut actions = Vec::new();
        let mut published = Vec::new();
        for (_, committables) in &todo {
            for c in committables {
                self.files.commit(c).await?;
                let add = self.table.add_action(c, now_ms)?;
                published.push((published_path(c)?, add.clone()));
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
        Ok(())
    }

    async fn abort_stale(&self, task: &TaskInfo, recovered: &[Committable]) -> Result<()> {
        self.files.abort_stale(&writers_task(task), recovered).await
    }
}

/// A partition's values, sorted by column.
type PartitionKey = Vec<(String, Option<String>)>;

/// The object a committable published.
fn published_path(c: &Committable) -> Result<Path> {
    let target = c
        .get("final")
        .and_then(|v| v.as_str())
        .ok_or_else(|| Error::Checkpoint(format!("Delta committable without a file: {c}")))?;
    Path::parse(target).map_err(|e| Error::Checkpoint(e.to_string()))
}

impl DeltaCommitter {
    /// `auto-compaction`: the files a commit just added that are smaller than `target`
    /// are rewritten, per partition, into files of about `target` bytes, in a second
    /// transaction (`OPTIMIZE`, no data change) that removes them and adds the new ones.
    /// Readers see the small files or the compacted ones, never both; a crash before
    /// that transaction leaves an unreferenced file nobody reads.
    async fn compact(
        &self,
        snapshot: &deltalake_core::table::state::DeltaTableState,
        published: Vec<(Path, Add)>,
        target: u64,
        now_ms: i64,
    ) -> Result<()> {
        // Bins of small files, per partition, in commit order.
        let mut partitions: BTreeMap<PartitionKey, Vec<Vec<(Path, Add)>>> = BTreeMap::new();
        for (path, add) in published {
            if add.size as u64 >= target {
                continue;
            }
            let mut key: Vec<_> = add.partition_values.clone().into_iter().collect();
            key.sort();
            let bins = partitions.entry(key).or_default();
            let full = bins
                .last()
                .is_none_or(|b| b.iter().map(|(_, a)| a.size as u64).sum::<u64>() >= target);
            if full {
                bins.push(Vec::new());
            }
            bins.last_mut().expect("a bin").push((path, add));
        }
        let mut actions = Vec::new();
        for bin in partitions.into_values().flatten().filter(|b| b.len() > 1) {
            let (path, add) = self.rewrite(&bin, now_ms).await?;
            tracing::debug!(files = bin.len(), into = %path, "compacting");
            actions.push(Action::Add(add));
            for (_, small) in bin {
                actions.push(Action::Remove(Remove {
                    path: small.path,
                    data_change: false,
                    deletion_timestamp: Some(now_ms),
                    extended_file_metadata: Some(true),
                    partition_values: Some(small.partition_values),
                    size: Some(small.size),
                    ..Default::default()
                }));
            }
        }
        if actions.is_empty() {
            return Ok(());
        }
        weir_common::failpoint("delta-before-compaction-commit")?;
        // With the post-commit hook, as every commit: a Delta checkpoint every 100 versions.
        CommitBuilder::from(CommitProperties::default())
            .with_actions(actions)
            .build(
                Some(snapshot),
                self.table.log_store.clone(),
                DeltaOperation::Optimize {
                    predicate: None,
                    target_size: target as i64,
                },
            )
            .await
            .map_err(|e| self.table.error(e))?;
        Ok(())
    }

    /// Writes the rows of `files` (of one partition) into one new file beside them.
    async fn rewrite(&self, files: &[(Path, Add)], now_ms: i64) -> Result<(Path, Add)> {
        let store = &self.table.store;
        let mut encoder = None;
        let mut rows = 0u64;
        for (path, _) in files {
            let bytes = store.get(path).await?.bytes().await?;
            let reader =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
                    .and_then(|b| b.build())
                    .map_err(|e| Error::external(format!("cannot read '{path}': {e}")))?;
            for batch in reader {
                let batch = batch?;
                if encoder.is_none() {
                    encoder = Some(crate::filesystem::format::PartEncoder::new(
                        &crate::filesystem::Format::Parquet,
                        &batch.schema(),
                    )?);
                }
                rows += batch.num_rows() as u64;
                encoder.as_mut().expect("an encoder").write(&batch)?;
            }
        }
        let encoder = encoder.ok_or_else(|| Error::internal("no rows in the files to compact"))?;
        let bytes = bytes::Bytes::from(encoder.finish()?);
        let first = &files[0].0;
        let name = format!("compacted-{}.parquet", uuid::Uuid::new_v4().simple());
        let parts: Vec<_> = first.parts().collect();
        let target: Path = parts[..parts.len() - 1]
            .iter()
            .cloned()
            .chain(std::iter::once(object_store::path::PathPart::from(
                name.as_str(),
            )))
            .collect();
        let size = bytes.len() as i64;
        store.put(&target, bytes.into()).await?;
        let relative = files[0].1.path.rsplit_once('/').map(|(dir, _)| dir);
        Ok((
            target,
            Add {
                path: match relative {
                    Some(dir) => format!("{dir}/{name}"),
                    None => name,
                },
                partition_values: files[0].1.partition_values.clone(),
                size,
                modification_time: now_ms,
                data_change: false,
                stats: Some(serde_json::json!({ "numRecords": rows }).to_string()),
                ..Default::default()
            },
        ))
    }

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
