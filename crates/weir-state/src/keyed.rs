//! Keyed operator state in a snapshot: Arrow IPC batches, one item per key group.
//!
//! A keyed operator's state is a table (or several, told apart by the operator's own item
//! fields) whose rows each belong to one key. At a snapshot the rows are split by the key
//! group of their key columns ([`crate::key`]) and every part becomes an item
//! `{"kg": <key group>, "payload": <index>}` whose payload is the part as Arrow IPC stream
//! bytes, stored raw beside the items (see [`crate::checkpoint::OperatorState`]). On
//! restore the runtime hands each item to the subtask that owns its key group.

use crate::checkpoint::{OperatorState, StateDistribution};
use crate::key::{hash_rows, key_group};
use arrow::array::RecordBatch;
use bytes::Bytes;
use weir_common::{Error, Result};

/// One batch as Arrow IPC stream bytes.
pub fn encode_batch(batch: &RecordBatch) -> Result<Bytes> {
    encode_batches(&batch.schema(), std::slice::from_ref(batch))
}

/// Batches of `schema` as one Arrow IPC stream.
pub fn encode_batches(schema: &arrow::datatypes::Schema, batches: &[RecordBatch]) -> Result<Bytes> {
    // Sized up front: growing the buffer as the writer goes copied it over and over
    // (q20's join snapshots spent a fifth of their copying there). The stream adds a
    // schema message, padding and metadata to the batches' buffers.
    let buffers: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();
    let mut bytes = Vec::with_capacity(buffers + buffers / 16 + 4096 * (batches.len() + 1));
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(&mut bytes, schema)?;
    for batch in batches {
        writer.write(batch)?;
    }
    writer.finish()?;
    drop(writer);
    Ok(Bytes::from(bytes))
}

/// The batches of an item's payload written by [`keyed_items`].
pub fn item_batches(state: &OperatorState, item: &serde_json::Value) -> Result<Vec<RecordBatch>> {
    let bytes = state.payload(item)?;
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
    Ok(reader.collect::<Result<Vec<_>, _>>()?)
}

/// The key group an item of keyed state belongs to. An item without one is corrupt
/// state, never silently a member of group 0.
pub fn item_key_group(item: &serde_json::Value, max_parallelism: usize) -> Result<usize> {
    match item.get("kg").and_then(|k| k.as_u64()) {
        Some(kg) if (kg as usize) < max_parallelism => Ok(kg as usize),
        Some(kg) => Err(Error::CorruptCheckpoint(format!(
            "keyed state item in key group {kg}, but the job has only {max_parallelism} key groups"
        ))),
        None => Err(Error::CorruptCheckpoint(format!(
            "keyed state item without a key group: {}",
            truncated(item)
        ))),
    }
}

/// The key groups an item of keyed state holds: one, `"kg": n`, or a range written by a
/// subtask that snapshots its whole range in one payload, `"kgs": [first, last]`, whose
/// rows a restore gives to every subtask owning a group of it, each keeping its own.
pub fn item_key_groups(
    item: &serde_json::Value,
    max_parallelism: usize,
) -> Result<std::ops::RangeInclusive<usize>> {
    let Some(range) = item.get("kgs") else {
        let kg = item_key_group(item, max_parallelism)?;
        return Ok(kg..=kg);
    };
    let bound = |i: usize| range.get(i).and_then(|k| k.as_u64()).map(|k| k as usize);
    match (bound(0), bound(1)) {
        (Some(first), Some(last)) if first <= last && last < max_parallelism => Ok(first..=last),
        _ => Err(Error::CorruptCheckpoint(format!(
            "keyed state item with key groups {range}, but the job has only {max_parallelism} \
             key groups"
        ))),
    }
}

/// The JSON fields naming key groups `first..=last` in an item (see
/// [`item_key_groups`]).
pub fn key_groups_fields(first: usize, last: usize) -> serde_json::Value {
    if first == last {
        serde_json::json!({ "kg": first })
    } else {
        serde_json::json!({ "kgs": [first, last] })
    }
}

fn truncated(item: &serde_json::Value) -> String {
    let text = item.to_string();
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
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
    let mut state = OperatorState::new(StateDistribution::KeyGroups, Vec::new());
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use std::sync::Arc;

    #[test]
    fn keyed_state_splits_by_key_group_and_round_trips() {
        let batch = RecordBatch::try_from_iter([
            (
                "k",
                Arc::new(Int64Array::from_iter_values(0..100)) as arrow::array::ArrayRef,
            ),
            (
                "v",
                Arc::new(StringArray::from_iter_values(
                    (0..100).map(|i| format!("v{i}")),
                )),
            ),
        ])
        .unwrap();
        let state = keyed_state(&batch, &[0], 8).unwrap();
        assert!(state.items.len() > 1 && state.items.len() <= 8);
        for item in &state.items {
            let kg = item_key_group(item, 8).unwrap();
            for part in item_batches(&state, item).unwrap() {
                let hashes = hash_rows(&part, &[0]).unwrap();
                assert!(hashes.iter().all(|h| key_group(*h, 8) == kg));
            }
        }
        let rows: usize = restored_batches(Some(state))
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum();
        assert_eq!(rows, 100);
    }

    #[test]
    fn items_hold_one_key_group_or_a_range() {
        let of = |item: serde_json::Value| item_key_groups(&item, 128);
        assert_eq!(of(serde_json::json!({"kg": 7})).unwrap(), 7..=7);
        assert_eq!(of(key_groups_fields(7, 7)).unwrap(), 7..=7);
        assert_eq!(of(key_groups_fields(64, 127)).unwrap(), 64..=127);
        for wrong in [
            serde_json::json!({"kgs": [64, 128]}),
            serde_json::json!({"kgs": [9, 8]}),
            serde_json::json!({"kgs": [1]}),
        ] {
            let err = of(wrong).unwrap_err();
            assert!(err.to_string().contains("only 128 key groups"), "{err}");
        }
    }

    #[test]
    fn an_item_without_a_valid_key_group_is_corrupt() {
        let missing = item_key_group(&serde_json::json!({"payload": 0}), 128).unwrap_err();
        assert!(
            missing.to_string().contains("without a key group"),
            "{missing}"
        );
        let outside = item_key_group(&serde_json::json!({"kg": 128}), 128).unwrap_err();
        assert!(
            outside.to_string().contains("only 128 key groups"),
            "{outside}"
        );
        assert_eq!(
            item_key_group(&serde_json::json!({"kg": 127}), 128).unwrap(),
            127
        );
    }
}
