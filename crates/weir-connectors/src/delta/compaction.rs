//! `auto-compaction` of a Delta table: after a commit, its small files are rewritten per
//! partition into fewer, in a second transaction.

use super::sink::DeltaCommitter;
use deltalake_core::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake_core::kernel::{Action, Add, Remove};
use deltalake_core::protocol::DeltaOperation;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use std::collections::BTreeMap;
use weir_common::{Error, Result};

/// A partition's values, sorted by column.
type PartitionKey = Vec<(String, Option<String>)>;

impl DeltaCommitter {
    /// `auto-compaction`: the files a commit just added that are smaller than `target`
    /// are rewritten, per partition, into files of about `target` bytes, in a second
    /// transaction (`OPTIMIZE`, no data change) that removes them and adds the new ones.
    /// Readers see the small files or the compacted ones, never both; a crash before
    /// that transaction leaves an unreferenced file nobody reads.
    pub(super) async fn compact(
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
}
