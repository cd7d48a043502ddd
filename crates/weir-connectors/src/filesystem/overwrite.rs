//! `INSERT OVERWRITE` of a filesystem table in batch mode, as Flink does it: what the
//! table held before is replaced by what the statement writes — the whole table when it is
//! not partitioned, the partitions the statement writes into when it is (dynamic partition
//! overwrite). The new files are committed first (the two-phase commit of every write),
//! then the old ones are deleted: a reader may see both for a moment, never neither, and a
//! failed statement leaves the old files in place.

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use std::collections::BTreeSet;
use std::sync::Arc;
use weir_common::{ConnectorOptions, Error, Result};
use weir_runtime::storage::resolve;

/// The visible files of a table, taken before an overwrite writes.
pub struct Snapshot {
    store: Arc<dyn ObjectStore>,
    root: Path,
    files: BTreeSet<Path>,
}

async fn visible(store: &dyn ObjectStore, root: &Path, location: &str) -> Result<BTreeSet<Path>> {
    Ok(super::source::list_files(store, root, location)
        .await?
        .into_iter()
        .collect())
}

/// The folder of `file` below `root` (its partition), `""` at the root.
fn folder(file: &Path, root: &Path) -> String {
    let parts: Vec<String> = file
        .prefix_match(root)
        .map(|p| p.map(|p| p.as_ref().to_string()).collect())
        .unwrap_or_default();
    parts[..parts.len().saturating_sub(1)].join("/")
}

impl Snapshot {
    pub async fn take(options: &ConnectorOptions) -> Result<Self> {
        let location = options.required("path")?.to_string();
        let resolved = resolve(&location, true, &super::s3_settings(options)?)?;
        let files = visible(resolved.store.as_ref(), &resolved.path, &location).await?;
        Ok(Self {
            store: resolved.store,
            root: resolved.path,
            files,
        })
    }

    /// Once the statement's files are committed: deletes the files of the snapshot that
    /// they replace.
    pub async fn replace(self, options: &ConnectorOptions, partitioned: bool) -> Result<()> {
        let location = options.required("path")?;
        let replaced: Vec<&Path> = if partitioned {
            let now = visible(self.store.as_ref(), &self.root, location).await?;
            let written: BTreeSet<String> = now
                .difference(&self.files)
                .map(|f| folder(f, &self.root))
                .collect();
            self.files
                .iter()
                .filter(|f| written.contains(&folder(f, &self.root)))
                .collect()
        } else {
            self.files.iter().collect()
        };
        for file in replaced {
            self.store.delete(file).await.map_err(|e| {
                Error::external(format!(
                    "INSERT OVERWRITE '{}': the new files are committed, but the old file \
                     '{file}' could not be deleted: {e}",
                    options.table
                ))
            })?;
        }
        Ok(())
    }
}
