//! `'connector' = 'delta'`: Delta Lake tables on the local file system or S3, through the
//! `deltalake` crates: an exactly-once sink ([`sink`], with `auto-compaction` in
//! [`compaction`]) and a bounded source of a table's latest snapshot ([`source`]).

use deltalake_core::DeltaTableError;
use deltalake_core::kernel::StructType;
use deltalake_core::logstore::{LogStoreRef, StorageConfig};
use object_store::ObjectStore;
use object_store::path::Path;
use std::sync::Arc;
use weir_common::{Error, Result};

mod compaction;
mod sink;
mod source;

pub use sink::DeltaSink;
pub use source::source;

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
