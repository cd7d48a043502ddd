//! `ChangelogNormalize` (Flink's name): turns an upsert stream — `+I`/`+U` rows that replace
//! the row of their key, `-D` rows that carry only the key — into a full changelog, as
//! Flink does after an `upsert-kafka` source. Each key keeps its last row: an upsert of a
//! new key emits `+I`, of a known key `-U` (the old row) and `+U` (the new one), and
//! nothing when the row is unchanged; a delete emits `-D` with the old row, or nothing
//! for an unknown key.
//!
//! Input arrives hash-partitioned by the key columns. State is keyed (one row per key,
//! snapshotted as rows of the input schema) and `table.exec.state.ttl` drops keys
//! untouched that long. A snapshot writes the keys whose row changed since the previous
//! one (`operators::delta`, keys named by their key hash); after a delete or an expiry it
//! writes every key. Past the job's state memory budget (`taskmanager.memory.managed.size`),
//! the least recently used keys move to local disk ([`weir_state::cold`]) and come back
//! when a row of theirs does; the snapshots' bookkeeping counts in the budget too.

use super::delta::{DeltaSnapshots, HashDeltas};
use super::hot::ByHash;
use super::keys;
use super::state::{Ttl, item_batches, now_ms};
use arrow::array::{Int8Array, RecordBatch};
use arrow::datatypes::SchemaRef;
use arrow::row::{OwnedRow, RowConverter, Rows, SortField};
use async_trait::async_trait;
use std::sync::Arc;
use weir_common::changelog::{self, RowKind};
use weir_common::{CheckpointId, Result};
use weir_runtime::{Operator, OperatorFactory, OperatorState, Output, StateDistribution, TaskInfo};
use weir_state::cold::{self, ColdEntries};
use weir_state::spill::StateMemory;

/// Creates ChangelogNormalize operators.
pub struct ChangelogNormalizeFactory {
    /// The key columns of the input (the table's primary key).
    pub keys: Vec<usize>,
    /// Schema of the input (and of the output) without the row-kind column.
    pub schema: SchemaRef,
    /// `table.exec.state.ttl`.
    pub state_ttl: Option<std::time::Duration>,
    /// The job's state budget: past it, the least recently used keys move to disk.
    pub state_memory: Option<Arc<StateMemory>>,
}

impl OperatorFactory for ChangelogNormalizeFactory {
    fn name(&self) -> String {
        format!(
            "ChangelogNormalize(key: {})",
            keys::names(&self.schema, &self.keys)
        )
    }

    fn create(&self, task: &TaskInfo) -> Result<Box<dyn Operator>> {
        let fields = self
            .schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(Box::new(ChangelogNormalize {
            keys: self.keys.clone(),
            schema: keys::nullable(&self.schema),
            output: changelog::with_op_field(&keys::nullable(&self.schema)),
            key_rows: keys::converter(&self.schema, &self.keys)?,
            full_rows: RowConverter::new(fields)?,
            last: ByHash::default(),
            ttl: Ttl::new(self.state_ttl),
            deltas: HashDeltas::new(
                DeltaSnapshots::new(task.max_parallelism, task.incremental_checkpoints)
                    .on_disk(self.state_memory.clone()),
            ),
            cold: ColdEntries::new(self.state_memory.clone()),
            hot_bytes: 0,
        }))
    }
}

struct ChangelogNormalize {
    keys: Vec<usize>,
    schema: SchemaRef,
    output: SchemaRef,
    key_rows: RowConverter,
    full_rows: RowConverter,
    /// Each key's last row, and when it was last touched (keys in memory).
    last: ByHash<(OwnedRow, u64)>,
    ttl: Option<Ttl>,
    /// What earlier snapshots wrote, and the hashes of the keys whose row changed since.
    deltas: HashDeltas,
    /// Keys moved to disk: the key's row bytes, then its last row's.
    cold: ColdEntries,
    /// What the keys in `last` hold, as [`key_bytes`] counts it.
    hot_bytes: u64,
}

/// Memory of a key besides its bytes and its row's: both rows' headers, the time and the
/// map's slack (about).
const KEY_OVERHEAD: u64 = 96;

/// What key `key` with last row `row` takes in memory (about).
fn key_bytes(key: &OwnedRow, row: &OwnedRow) -> u64 {
    KEY_OVERHEAD + (key.row().as_ref().len() + row.row().as_ref().len()) as u64
}

impl ChangelogNormalize {
    /// Key `key`'s last row (`hash` its key hash), taken out of memory or off the disk.
    fn take(&mut self, key: &OwnedRow, hash: u64) -> Result<Option<OwnedRow>> {
        if let Some((row, _)) = self.last.remove(hash, key) {
            self.hot_bytes -= key_bytes(key, &row);
            return Ok(Some(row));
        }
        let taken = self.cold.take(hash, key.row().as_ref())?;
        Ok(taken.map(|(bytes, _)| self.full_rows.parser().parse(&bytes).owned()))
    }

    /// Keeps `row` as key `key`'s last row, in memory, touched at `touched`.
    fn put(&mut self, key: OwnedRow, hash: u64, row: OwnedRow, touched: u64) {
        self.hot_bytes += key_bytes(&key, &row);
        self.last.insert(hash, key, (row, touched));
    }

    /// The last rows of the keys of hashes `hashes`, in memory or on disk.
    fn rows_of_hashes(&self, hashes: &[u64]) -> Result<RecordBatch> {
        let mut rows: Vec<OwnedRow> = Vec::with_capacity(hashes.len());
        for hash in hashes {
            rows.extend(self.last.of_hash(*hash).map(|(_, (row, _))| row.clone()));
            if let Some((_, bytes)) = self.cold.get_by_hash(*hash)? {
                rows.push(self.full_rows.parser().parse(&bytes).owned());
            }
        }
        let columns = self.full_rows.convert_rows(rows.iter().map(|r| r.row()))?;
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// A batch's keys and rows in row format, and its keys' hashes by row.
    fn converted(&self, batch: &RecordBatch) -> Result<(Rows, Rows, Vec<u64>)> {
        Ok((
            (self.key_rows).convert_columns(&keys::columns(batch, &self.keys))?,
            self.full_rows.convert_columns(batch.columns())?,
            keys::hashes(batch, &self.keys)?,
        ))
    }

    /// Keys were dropped: the next snapshot writes every key.
    fn start_over(&mut self) {
        self.deltas.start_over();
    }

    /// While the job's state is over its budget, moves the least recently used keys to
    /// disk.
    fn relieve(&mut self) -> Result<()> {
        let bookkeeping = self.deltas.bookkeeping();
        if !self.cold.set_hot(self.hot_bytes + bookkeeping) {
            return Ok(());
        }
        let moving = cold::least_recently_used(
            self.last.iter().map(|(h, k, (_, used))| ((h, k), *used)),
            |(h, k)| key_bytes(k, &self.last.get(*h, k).expect("a key in memory").0),
            self.hot_bytes,
            self.cold.hot_target().saturating_sub(bookkeeping),
        );
        let moving: Vec<(u64, OwnedRow, u64)> = (moving.into_iter())
            .map(|((hash, key), bytes)| (hash, key.clone(), bytes))
            .collect();
        for (hash, key, bytes) in moving {
            let (row, touched) = self.last.remove(hash, &key).expect("a key in memory");
            if self
                .cold
                .put(hash, key.row().as_ref(), row.row().as_ref(), touched)?
            {
                self.hot_bytes -= bytes;
            } else {
                self.last.insert(hash, key, (row, touched));
            }
        }
        self.cold.set_hot(self.hot_bytes + bookkeeping);
        Ok(())
    }
}

#[async_trait]
impl Operator for ChangelogNormalize {
    async fn open(&mut self, restored: Option<OperatorState>) -> Result<()> {
        // A key group's parts come in order: a key's row in a later part replaces the
        // one in an earlier part.
        let Some(state) = restored else {
            return Ok(());
        };
        for item in &state.items {
            for batch in item_batches(&state, item)? {
                let (key, full, hashes) = self.converted(&batch)?;
                let now = now_ms();
                for (r, hash) in hashes.into_iter().enumerate() {
                    let k = key.row(r).owned();
                    self.take(&k, hash)?;
                    self.put(k, hash, full.row(r).owned(), now);
                }
                self.relieve()?;
            }
        }
        Ok(())
    }

    async fn process_batch(
        &mut self,
        _: usize,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()> {
        let (batch, ops) = changelog::split(&batch);
        let (key, full, hashes) = self.converted(&batch)?;
        let now = now_ms();
        if let Some(cutoff) = self.ttl.as_mut().and_then(|t| t.due(now)) {
            let mut freed = 0;
            self.last.retain(|key, (row, touched)| {
                let keep = *touched >= cutoff;
                if !keep {
                    freed += key_bytes(key, row);
                }
                keep
            });
            self.hot_bytes -= freed;
            if freed > 0 || self.cold.expire(cutoff)? > 0 {
                self.start_over();
            }
        }
        let mut rows: Vec<OwnedRow> = Vec::new();
        let mut kinds: Vec<i8> = Vec::new();
        for (i, hash) in hashes.into_iter().enumerate() {
            let k = key.row(i).owned();
            if changelog::kind_at(ops.as_ref(), i).is_retraction() {
                if let Some(old) = self.take(&k, hash)? {
                    rows.push(old);
                    kinds.push(RowKind::Delete as i8);
                    // A dropped key is in no later part: the next snapshot is whole.
                    self.start_over();
                }
                continue;
            }
            let new = full.row(i).owned();
            if let Some((old, touched)) = self.last.get_mut(hash, &k) {
                *touched = now;
                if *old != new {
                    self.hot_bytes += new.row().as_ref().len() as u64;
                    self.hot_bytes -= old.row().as_ref().len() as u64;
                    rows.push(std::mem::replace(old, new.clone()));
                    kinds.push(RowKind::UpdateBefore as i8);
                    rows.push(new);
                    kinds.push(RowKind::UpdateAfter as i8);
                    self.deltas.mark(hash);
                }
                continue;
            }
            match self.take(&k, hash)? {
                None => {
                    rows.push(new.clone());
                    kinds.push(RowKind::Insert as i8);
                    self.deltas.mark(hash);
                }
                Some(old) if old == new => {}
                Some(old) => {
                    rows.push(old);
                    kinds.push(RowKind::UpdateBefore as i8);
                    rows.push(new.clone());
                    kinds.push(RowKind::UpdateAfter as i8);
                    self.deltas.mark(hash);
                }
            }
            self.put(k, hash, new, now);
        }
        self.relieve()?;
        if rows.is_empty() {
            return Ok(());
        }
        let mut columns = self.full_rows.convert_rows(rows.iter().map(|r| r.row()))?;
        columns.push(Arc::new(Int8Array::from(kinds)));
        out.emit(RecordBatch::try_new(self.output.clone(), columns)?);
        Ok(())
    }

    fn state_bytes(&self) -> usize {
        (self.hot_bytes + self.cold.on_disk()) as usize + self.deltas.size()
    }

    fn snapshot_state(&mut self, checkpoint: CheckpointId) -> Result<OperatorState> {
        if self.last.is_empty() && self.cold.is_empty() {
            self.start_over();
            return Ok(OperatorState::new(StateDistribution::KeyGroups, Vec::new()));
        }
        // (Out of `self` while it reads the rows.)
        let mut deltas = std::mem::take(&mut self.deltas);
        let hot = self.last.iter().map(|(hash, _, _)| hash);
        let every = || hot.chain(self.cold.hashes()).collect();
        let state = deltas.snapshot(checkpoint, every, |h| self.rows_of_hashes(h));
        self.deltas = deltas;
        state
    }

    async fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.deltas.completed(checkpoint);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::state::rows_as_text;
    use arrow::array::{Array, AsArray, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use std::sync::Arc;

    fn upserts(rows: &[(i64, Option<&str>, RowKind)]) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
        ]);
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap();
        let kinds = Int8Array::from_iter_values(rows.iter().map(|r| r.2 as i8));
        changelog::attach(&batch, Arc::new(kinds)).unwrap()
    }

    fn shown(out: &mut Output) -> Vec<String> {
        out.take()
            .into_iter()
            .flat_map(|item| match item {
                weir_runtime::StreamItem::Batch(b) => {
                    let (data, ops) = changelog::split(&b);
                    let ops = ops.unwrap();
                    (0..b.num_rows())
                        .map(|i| {
                            let v = data.column(1).as_string::<i32>();
                            format!(
                                "{}[{}, {}]",
                                RowKind::from_i8(ops.value(i)).short(),
                                data.column(0).as_primitive::<Int64Type>().value(i),
                                if v.is_null(i) { "null" } else { v.value(i) }
                            )
                        })
                        .collect::<Vec<_>>()
                }
                _ => Vec::new(),
            })
            .collect()
    }

    #[tokio::test]
    async fn upserts_and_deletes_become_a_changelog_and_survive_a_restore() {
        let schema = upserts(&[]).schema();
        let factory = ChangelogNormalizeFactory {
            keys: vec![0],
            schema: Arc::new(schema.project(&[0, 1]).unwrap()),
            state_ttl: None,
            state_memory: None,
        };
        let task = crate::batch::task("normalize");
        let mut op = factory.create(&task).unwrap();
        op.open(None).await.unwrap();
        let mut out = Output::default();
        use RowKind::*;
        let input = upserts(&[
            (1, Some("a"), Insert),
            (2, Some("b"), Insert),
            (1, Some("a"), Insert),
            (1, Some("c"), UpdateAfter),
            (3, None, Delete),
            (2, None, Delete),
        ]);
        op.process_batch(0, input, &mut out).await.unwrap();
        assert_eq!(
            shown(&mut out),
            ["+I[1, a]", "+I[2, b]", "-U[1, a]", "+U[1, c]", "-D[2, b]"]
        );
        let state = op.snapshot_state(CheckpointId(1)).unwrap();
        let mut again = factory.create(&task).unwrap();
        again.open(Some(state)).await.unwrap();
        let input = upserts(&[(1, None, Delete), (2, Some("d"), Insert)]);
        again.process_batch(0, input, &mut out).await.unwrap();
        assert_eq!(shown(&mut out), ["-D[1, c]", "+I[2, d]"]);
    }

    /// Under a budget a small part of its state, the operator moves keys to disk and back
    /// (every round reaches every key, in another order; one round deletes a tenth of
    /// them, the next brings them back), and emits, snapshots (delta and whole) and
    /// restores (under the budget too) exactly what it does in memory.
    #[tokio::test]
    async fn keys_on_disk_change_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let budget = 512 << 10;
        let memory = StateMemory::new(budget, tmp.path().to_path_buf());
        let schema = upserts(&[]).schema();
        let factory = |memory: Option<Arc<StateMemory>>| ChangelogNormalizeFactory {
            keys: vec![0],
            schema: Arc::new(schema.project(&[0, 1]).unwrap()),
            state_ttl: None,
            state_memory: memory,
        };
        let mut task = crate::batch::task("normalize");
        task.incremental_checkpoints = true;
        let mut spilled = factory(Some(memory.clone())).create(&task).unwrap();
        let mut reference = factory(None).create(&task).unwrap();
        spilled.open(None).await.unwrap();
        reference.open(None).await.unwrap();
        let pad = "p".repeat(600);
        let mut states = (None, None);
        for round in 0..8i64 {
            let values: Vec<String> = (0..3000i64)
                .map(|k| format!("{pad}{}", (k + round) % 4))
                .collect();
            let rows: Vec<(i64, Option<&str>, RowKind)> = (0..3000i64)
                .map(|i| (i * 7 + round * 1001) % 3000)
                .map(|k| match round == 5 && k % 10 == 0 {
                    true => (k, None, RowKind::Delete),
                    false => (k, Some(values[k as usize].as_str()), RowKind::UpdateAfter),
                })
                .collect();
            let input = upserts(&rows);
            let (mut a, mut b) = (Output::default(), Output::default());
            spilled
                .process_batch(0, input.clone(), &mut a)
                .await
                .unwrap();
            reference.process_batch(0, input, &mut b).await.unwrap();
            assert_eq!(shown(&mut a), shown(&mut b), "round {round}");
            assert!(memory.used() <= budget, "{} bytes in memory", memory.used());
            if round % 3 == 1 || round == 5 {
                let checkpoint = CheckpointId(round as u64);
                states = (
                    Some(spilled.snapshot_state(checkpoint).unwrap()),
                    Some(reference.snapshot_state(checkpoint).unwrap()),
                );
            }
        }
        assert!(
            reference.state_bytes() > 5 * budget as usize,
            "the state ({} bytes) is not 5 times the budget",
            reference.state_bytes()
        );
        let (spilled_state, reference_state) = (states.0.unwrap(), states.1.unwrap());
        assert_eq!(
            rows_as_text(spilled_state.clone()),
            rows_as_text(reference_state.clone())
        );
        // Restored under the budget, snapshotted whole: the keys on disk are read.
        drop(spilled);
        let whole = crate::batch::task("normalize");
        let mut restored = factory(Some(memory.clone())).create(&whole).unwrap();
        restored.open(Some(spilled_state)).await.unwrap();
        assert!(memory.used() <= budget);
        let mut expected = factory(None).create(&whole).unwrap();
        expected.open(Some(reference_state)).await.unwrap();
        let rows = rows_as_text(restored.snapshot_state(CheckpointId(9)).unwrap());
        assert_eq!(rows.len(), 3000);
        assert_eq!(
            rows,
            rows_as_text(expected.snapshot_state(CheckpointId(9)).unwrap())
        );
    }
}
