//! Encoding of keyed operator state: Arrow IPC batches stored as the binary payloads of an
//! `OperatorState` (raw bytes beside the JSON items, see `weir_runtime::checkpoint`).

use arrow::array::RecordBatch;
use bytes::Bytes;
use weir_common::Result;
use weir_runtime::OperatorState;

/// One batch as Arrow IPC stream bytes.
pub fn encode_batch(batch: &RecordBatch) -> Result<Bytes> {
    let mut bytes = Vec::new();
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(&mut bytes, &batch.schema())?;
    writer.write(batch)?;
    writer.finish()?;
    drop(writer);
    Ok(Bytes::from(bytes))
}

/// The batches of an item's payload written by [`keyed_items`].
pub fn item_batches(state: &OperatorState, item: &serde_json::Value) -> Result<Vec<RecordBatch>> {
    let bytes = state.payload(item)?.clone();
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
    Ok(reader.collect::<Result<Vec<_>, _>>()?)
}

/// Splits `all` by the key group of its `keys` columns and adds each part to `state` as an
/// item `{"kg": …, "payload": …}`, so a restore hands each key group to its new owner.
/// Returns the positions of the added items.
pub fn keyed_items(
    all: &RecordBatch,
    keys: &[usize],
    max_parallelism: usize,
    state: &mut OperatorState,
) -> Result<std::ops::Range<usize>> {
    use weir_runtime::exchange::{hash_rows, key_group};
    let mut by_group: std::collections::BTreeMap<usize, Vec<u32>> = Default::default();
    for (row, h) in hash_rows(all, keys)?.into_iter().enumerate() {
        by_group
            .entry(key_group(h, max_parallelism))
            .or_default()
            .push(row as u32);
    }
    let first = state.items.len();
    for (kg, rows) in by_group {
        let part = arrow::compute::take_record_batch(all, &arrow::array::UInt32Array::from(rows))?;
        let payload = state.add_payload(encode_batch(&part)?);
        state
            .items
            .push(serde_json::json!({ "kg": kg, "payload": payload }));
    }
    Ok(first..state.items.len())
}

/// A keyed state holding `all`, split by the key group of its `keys` columns.
pub fn keyed_state(
    all: &RecordBatch,
    keys: &[usize],
    max_parallelism: usize,
) -> Result<OperatorState> {
    let mut state = OperatorState::new(weir_runtime::StateDistribution::KeyGroups, Vec::new());
    keyed_items(all, keys, max_parallelism, &mut state)?;
    Ok(state)
}

/// Every batch stored by [`keyed_items`] in a restored state.
pub fn restored_batches(restored: Option<OperatorState>) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    if let Some(state) = restored {
        for item in &state.items {
            out.extend(item_batches(&state, item)?);
        }
    }
    Ok(out)
}

/// `table.exec.state.ttl` for one operator: state untouched for the TTL (processing
/// time) is dropped. Expiry is checked at most every quarter of the TTL.
pub struct Ttl {
    ttl_ms: u64,
    next_sweep: u64,
}

impl Ttl {
    /// `None` when state lives forever.
    pub fn new(ttl: Option<std::time::Duration>) -> Option<Ttl> {
        let ttl_ms = ttl?.as_millis().max(1) as u64;
        Some(Ttl {
            ttl_ms,
            next_sweep: now_ms() + ttl_ms / 4,
        })
    }

    /// When a sweep is due at `now`, the time before which untouched state has expired.
    pub fn due(&mut self, now: u64) -> Option<u64> {
        if now < self.next_sweep {
            return None;
        }
        self.next_sweep = now + (self.ttl_ms / 4).max(1);
        Some(now.saturating_sub(self.ttl_ms))
    }
}

pub use weir_common::now_ms;
