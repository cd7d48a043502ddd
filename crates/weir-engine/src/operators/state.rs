//! Keyed operator state: the snapshot codec lives in `weir_state::keyed`; state TTL here.

pub use weir_state::keyed::{item_batches, keyed_items, keyed_state, restored_batches};

/// Adds `all` to `state` split by the key group of its `keys` columns ([`keyed_items`]),
/// each item marked `{field: value}`, so that a restore tells an operator's tables apart.
pub fn tagged_keyed_items(
    all: &arrow::array::RecordBatch,
    keys: &[usize],
    max_parallelism: usize,
    state: &mut weir_runtime::OperatorState,
    (field, value): (&str, &str),
) -> weir_common::Result<()> {
    let items = keyed_items(all, keys, max_parallelism, state)?;
    for item in &mut state.items[items] {
        item[field] = serde_json::json!(value);
    }
    Ok(())
}

/// Entries of `cold` are read and turned into snapshot rows this many bytes at a time.
const SNAPSHOT_CHUNK: usize = 8 << 20;

/// Adds the state of the entries on disk `cold` to `state`, split by the key group of the
/// `keys` columns: `rows_of` turns a few megabytes of entries' values at a time into
/// snapshot rows. Under a budget (`memory`), the encoded items wait in a local file until
/// the checkpoint writes them, so that a snapshot of state on disk does not hold it in
/// memory.
pub fn snapshot_entries(
    cold: &weir_state::cold::ColdEntries,
    rows_of: impl Fn(&[Vec<u8>]) -> weir_common::Result<arrow::array::RecordBatch>,
    keys: &[usize],
    max_parallelism: usize,
    memory: Option<&std::sync::Arc<weir_state::spill::StateMemory>>,
    state: &mut weir_runtime::OperatorState,
) -> weir_common::Result<()> {
    let mut file = None;
    let mut flush = |chunk: &mut Vec<Vec<u8>>,
                     state: &mut weir_runtime::OperatorState|
     -> weir_common::Result<()> {
        let batch = rows_of(chunk)?;
        chunk.clear();
        let items = keyed_items(&batch, keys, max_parallelism, state)?;
        let Some(memory) = memory else {
            return Ok(());
        };
        let file = weir_state::spill::SpillFile::in_slot(&mut file, memory)?;
        for i in items {
            let p = (state.items[i]["payload"].as_u64())
                .ok_or_else(|| weir_common::Error::internal("a keyed item without its payload"))?
                as usize;
            let bytes = std::mem::take(&mut state.payloads[p]);
            let (_, payload) = file.keep(vec![((), bytes)])?.remove(0);
            state.set_disk_payload(p, payload);
        }
        Ok(())
    };
    let (mut chunk, mut bytes) = (Vec::new(), 0);
    cold.for_each(|_, value| {
        bytes += value.len();
        chunk.push(value.to_vec());
        if bytes >= SNAPSHOT_CHUNK {
            bytes = 0;
            flush(&mut chunk, state)?;
        }
        Ok(())
    })?;
    if !chunk.is_empty() {
        flush(&mut chunk, state)?;
    }
    Ok(())
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

/// Every row a snapshot `state` holds, its columns as text joined by commas, sorted.
#[cfg(test)]
pub fn rows_as_text(state: weir_runtime::OperatorState) -> Vec<String> {
    use arrow::util::display::array_value_to_string;
    let mut rows: Vec<String> = restored_batches(Some(state))
        .unwrap()
        .iter()
        .flat_map(|b| {
            (0..b.num_rows()).map(move |r| {
                let cells = b
                    .columns()
                    .iter()
                    .map(|c| array_value_to_string(c, r).unwrap());
                cells.collect::<Vec<_>>().join(",")
            })
        })
        .collect();
    rows.sort();
    rows
}
