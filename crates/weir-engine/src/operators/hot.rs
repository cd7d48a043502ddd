//! Keyed state in memory found by its key hash ([`weir_state::key`]), the name snapshots
//! and the disk ([`weir_state::cold`]) give a key: operators that write delta snapshots by
//! key hash look their keys up by that hash, without a second table.

use arrow::row::OwnedRow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use weir_state::cold::HashOfHash;

/// Values of keys (rows in arrow's row format) by key hash: one table from a hash to its
/// first key and value, and a list of the keys whose hash another key already has (with
/// 64-bit hashes, next to none), each of which has its hash in the table.
pub(super) struct ByHash<V> {
    main: HashMap<u64, (OwnedRow, V), HashOfHash>,
    clashes: Vec<(u64, OwnedRow, V)>,
}

impl<V> Default for ByHash<V> {
    fn default() -> Self {
        ByHash {
            main: HashMap::default(),
            clashes: Vec::new(),
        }
    }
}

impl<V> ByHash<V> {
    #[cfg(test)]
    fn len(&self) -> usize {
        self.main.len() + self.clashes.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.main.is_empty()
    }

    pub(super) fn get(&self, hash: u64, key: &OwnedRow) -> Option<&V> {
        match self.main.get(&hash) {
            Some((k, v)) if k == key => Some(v),
            Some(_) => (self.clashes.iter())
                .find(|(h, k, _)| *h == hash && k == key)
                .map(|(_, _, v)| v),
            None => None,
        }
    }

    pub(super) fn get_mut(&mut self, hash: u64, key: &OwnedRow) -> Option<&mut V> {
        match self.main.get_mut(&hash) {
            Some((k, v)) if k == key => Some(v),
            Some(_) => (self.clashes.iter_mut())
                .find(|(h, k, _)| *h == hash && k == key)
                .map(|(_, _, v)| v),
            None => None,
        }
    }

    /// Keeps `value` for `key` (of hash `hash`); returns the value it replaces.
    pub(super) fn insert(&mut self, hash: u64, key: OwnedRow, value: V) -> Option<V> {
        match self.main.entry(hash) {
            Entry::Vacant(e) => {
                e.insert((key, value));
                None
            }
            Entry::Occupied(mut e) if e.get().0 == key => {
                Some(std::mem::replace(&mut e.get_mut().1, value))
            }
            Entry::Occupied(_) => {
                let clash = (self.clashes.iter_mut()).find(|(h, k, _)| *h == hash && *k == key);
                match clash {
                    Some((_, _, v)) => Some(std::mem::replace(v, value)),
                    None => {
                        self.clashes.push((hash, key, value));
                        None
                    }
                }
            }
        }
    }

    pub(super) fn remove(&mut self, hash: u64, key: &OwnedRow) -> Option<V> {
        match self.main.get(&hash) {
            Some((k, _)) if k == key => {
                let (_, value) = self.main.remove(&hash).expect("looked up");
                // A clash of the same hash takes its place.
                if let Some(at) = self.clashes.iter().position(|(h, _, _)| *h == hash) {
                    let (h, k, v) = self.clashes.swap_remove(at);
                    self.main.insert(h, (k, v));
                }
                Some(value)
            }
            Some(_) => {
                let at = (self.clashes.iter()).position(|(h, k, _)| *h == hash && k == key)?;
                Some(self.clashes.swap_remove(at).2)
            }
            None => None,
        }
    }

    /// Every key: its hash, itself and its value.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &OwnedRow, &V)> {
        let main = self.main.iter().map(|(h, (k, v))| (*h, k, v));
        main.chain(self.clashes.iter().map(|(h, k, v)| (*h, k, v)))
    }

    /// The keys of hash `hash` and their values.
    pub(super) fn of_hash(&self, hash: u64) -> impl Iterator<Item = (&OwnedRow, &V)> {
        let clashes = match self.main.contains_key(&hash) && !self.clashes.is_empty() {
            true => &self.clashes[..],
            false => &[],
        };
        let main = self.main.get(&hash).map(|(k, v)| (k, v));
        main.into_iter().chain(
            clashes
                .iter()
                .filter(move |(h, _, _)| *h == hash)
                .map(|(_, k, v)| (k, v)),
        )
    }

    /// Keeps the keys `keep` says true of.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&OwnedRow, &mut V) -> bool) {
        self.main.retain(|_, (k, v)| keep(k, v));
        self.clashes.retain_mut(|(_, k, v)| keep(k, v));
        // A clash whose hash left the table takes its place.
        let mut at = 0;
        while at < self.clashes.len() {
            let hash = self.clashes[at].0;
            if self.main.contains_key(&hash) {
                at += 1;
            } else {
                let (h, k, v) = self.clashes.swap_remove(at);
                self.main.insert(h, (k, v));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::DataType;
    use arrow::row::{RowConverter, SortField};
    use std::sync::Arc;

    fn keys(n: i64) -> Vec<OwnedRow> {
        let converter = RowConverter::new(vec![SortField::new(DataType::Int64)]).unwrap();
        let rows = converter
            .convert_columns(&[Arc::new(Int64Array::from_iter_values(0..n))])
            .unwrap();
        rows.iter().map(|r| r.owned()).collect()
    }

    /// Keys of one hash all stay apart, whichever of them leaves first.
    #[test]
    fn keys_of_one_hash_stay_apart() {
        let keys = keys(4);
        let mut map = ByHash::default();
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(map.insert(7, key.clone(), i), None);
        }
        map.insert(8, keys[0].clone(), 10);
        assert_eq!(map.insert(7, keys[2].clone(), 20), Some(2));
        assert_eq!(map.len(), 5);
        assert_eq!(map.of_hash(7).map(|(_, v)| *v).sum::<usize>(), 24);
        assert_eq!(map.remove(7, &keys[0]), Some(0));
        assert_eq!(map.get(7, &keys[0]), None);
        assert_eq!(map.get(8, &keys[0]), Some(&10));
        *map.get_mut(7, &keys[3]).unwrap() += 100;
        map.retain(|_, v| *v != 1);
        let mut left: Vec<(u64, usize)> = map.iter().map(|(h, _, v)| (h, *v)).collect();
        left.sort();
        assert_eq!(left, [(7, 20), (7, 103), (8, 10)]);
        assert_eq!(map.remove(7, &keys[2]), Some(20));
        assert_eq!(map.remove(7, &keys[3]), Some(103));
        assert_eq!(map.of_hash(7).count(), 0);
        assert_eq!(map.len(), 1);
    }
}
