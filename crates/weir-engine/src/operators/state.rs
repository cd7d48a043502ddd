//! Encoding of keyed operator state: Arrow IPC batches, base64-encoded into the JSON items
//! of an `OperatorState`.

use arrow::array::RecordBatch;
use weir_common::{Error, Result};

/// One batch as base64 Arrow IPC stream bytes (a JSON string in the state item).
pub fn encode_batch(batch: &RecordBatch) -> Result<String> {
    use base64::Engine as _;
    let mut bytes = Vec::new();
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(&mut bytes, &batch.schema())?;
    writer.write(batch)?;
    writer.finish()?;
    drop(writer);
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// The batches of a string written by [`encode_batch`].
pub fn decode_batches(text: &str) -> Result<Vec<RecordBatch>> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| Error::Checkpoint(format!("corrupt operator state: {e}")))?;
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
    Ok(reader.collect::<Result<Vec<_>, _>>()?)
}

/// Splits `all` by the key group of its `keys` columns and encodes each part as one state
/// item `{"kg": …, "batch": …}`, so a restore hands each key group to its new owner.
pub fn keyed_items(
    all: &RecordBatch,
    keys: &[usize],
    max_parallelism: usize,
) -> Result<Vec<serde_json::Value>> {
    use weir_runtime::exchange::{hash_rows, key_group};
    let mut by_group: std::collections::BTreeMap<usize, Vec<u32>> = Default::default();
    for (row, h) in hash_rows(all, keys)?.into_iter().enumerate() {
        by_group
            .entry(key_group(h, max_parallelism))
            .or_default()
            .push(row as u32);
    }
    let mut items = Vec::with_capacity(by_group.len());
    for (kg, rows) in by_group {
        let part = arrow::compute::take_record_batch(all, &arrow::array::UInt32Array::from(rows))?;
        items.push(serde_json::json!({ "kg": kg, "batch": encode_batch(&part)? }));
    }
    Ok(items)
}

/// Every batch stored by [`keyed_items`] in a restored state.
pub fn restored_batches(restored: Option<weir_runtime::OperatorState>) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    for item in restored.map(|s| s.items).unwrap_or_default() {
        out.extend(decode_batches(item["batch"].as_str().unwrap_or_default())?);
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
