//! The key hash and key groups.
//!
//! Keyed state is split into `max_parallelism` key groups; a key's group decides which
//! subtask owns it, both when records are routed (hash exchange) and when a checkpoint is
//! restored at another parallelism. The hash is therefore part of the checkpoint format:
//! it must give the same value for the same key in every Weir build, on every machine,
//! with every toolchain and DataFusion version. It is Weir's own, written here and pinned
//! by tests, never a hasher whose output a dependency may change (`DefaultHasher`,
//! DataFusion's `create_hashes`, arrow's row format).
//!
//! # Key hash, version 1
//! For each row, `h = SEED`; then for each key column in order:
//! * a NULL: `h = xxh3_64(seed = h ^ NULL_MIX, "")`;
//! * otherwise `h = xxh3_64(seed = h, bytes)` (XXH3, 64 bits), where `bytes` is the
//!   value's canonical encoding:
//!   - signed integers, dates, times, timestamps, durations, year-month intervals: the
//!     value in its own unit as a little-endian `i64` (so `INT 5` and `BIGINT 5` agree);
//!   - unsigned integers: little-endian `u64`;
//!   - floating point: the value as `f64`, little-endian bits, with `-0.0` as `0.0` and
//!     every NaN as the canonical NaN;
//!   - booleans: one byte, 0 or 1;
//!   - strings: their UTF-8 bytes; binary: the bytes;
//!   - decimals: the unscaled value as a little-endian `i128` (or 256-bit integer);
//!   - dictionaries: as their values;
//!   - any other type (nested types, day-time intervals): its text as arrow displays it.
//!
//! The key group of a hash is `hash % max_parallelism`, and the subtask owning a key
//! group at parallelism `p` is `key_group * p / max_parallelism` (Flink's ranges).

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::*;
use twox_hash::XxHash3_64;
use weir_common::Result;

/// Version of the key hash described in the module documentation. Changing the hash in
/// any way means a new version and a new checkpoint format version.
pub const KEY_HASH_VERSION: u32 = 1;

/// Starting value of every row's hash (`"WEIRKEY1"`).
pub const SEED: u64 = 0x5745_4952_4b45_5931;
/// Mixed into the running hash for a NULL (the golden-ratio constant).
pub const NULL_MIX: u64 = 0x9e37_79b9_7f4a_7c15;

/// Hashes of the `keys` columns of every row of `batch`.
pub fn hash_rows(batch: &RecordBatch, keys: &[usize]) -> Result<Vec<u64>> {
    let columns: Vec<&dyn Array> = keys.iter().map(|k| batch.column(*k).as_ref()).collect();
    hash_arrays(&columns, batch.num_rows())
}

/// Hashes of the rows formed by `columns` (each `rows` long). No columns: every row has
/// the same hash.
pub fn hash_arrays(columns: &[&dyn Array], rows: usize) -> Result<Vec<u64>> {
    let mut hashes = vec![SEED; rows];
    for column in columns {
        hash_column(*column, &mut hashes)?;
    }
    Ok(hashes)
}

/// Key group of a hash.
pub fn key_group(hash: u64, max_parallelism: usize) -> usize {
    (hash % max_parallelism as u64) as usize
}

/// Subtask that owns a key group (Flink's `keyGroup * parallelism / maxParallelism`).
pub fn subtask_for_key_group(
    key_group: usize,
    parallelism: usize,
    max_parallelism: usize,
) -> usize {
    key_group * parallelism / max_parallelism
}

/// The key groups subtask `subtask` owns: those [`subtask_for_key_group`] gives it, one
/// contiguous range.
pub fn key_group_range(
    subtask: usize,
    parallelism: usize,
    max_parallelism: usize,
) -> std::ops::Range<usize> {
    (subtask * max_parallelism).div_ceil(parallelism)
        ..((subtask + 1) * max_parallelism).div_ceil(parallelism)
}

fn null(h: u64) -> u64 {
    XxHash3_64::oneshot_with_seed(h ^ NULL_MIX, b"")
}

fn value(h: u64, bytes: &[u8]) -> u64 {
    XxHash3_64::oneshot_with_seed(h, bytes)
}

/// Folds every row's value of `array` into `hashes`, where `bytes` gives a non-null
/// value's canonical encoding.
fn fold<A: Array + ?Sized, B: AsRef<[u8]>>(
    array: &A,
    hashes: &mut [u64],
    bytes: impl Fn(usize) -> B,
) {
    for (i, h) in hashes.iter_mut().enumerate() {
        *h = if array.is_null(i) {
            null(*h)
        } else {
            value(*h, bytes(i).as_ref())
        };
    }
}

fn canonical_f64(v: f64) -> [u8; 8] {
    let v = if v == 0.0 {
        0.0
    } else if v.is_nan() {
        f64::NAN
    } else {
        v
    };
    v.to_bits().to_le_bytes()
}

fn hash_column(array: &dyn Array, hashes: &mut [u64]) -> Result<()> {
    macro_rules! signed {
        ($t:ty) => {{
            let a = array.as_primitive::<$t>();
            fold(a, hashes, |i| (a.value(i) as i64).to_le_bytes())
        }};
    }
    macro_rules! unsigned {
        ($t:ty) => {{
            let a = array.as_primitive::<$t>();
            fold(a, hashes, |i| (a.value(i) as u64).to_le_bytes())
        }};
    }
    match array.data_type() {
        DataType::Null => hashes.iter_mut().for_each(|h| *h = null(*h)),
        DataType::Boolean => {
            let a = array.as_boolean();
            fold(a, hashes, |i| [a.value(i) as u8])
        }
        DataType::Int8 => signed!(Int8Type),
        DataType::Int16 => signed!(Int16Type),
        DataType::Int32 => signed!(Int32Type),
        DataType::Int64 => signed!(Int64Type),
        DataType::UInt8 => unsigned!(UInt8Type),
        DataType::UInt16 => unsigned!(UInt16Type),
        DataType::UInt32 => unsigned!(UInt32Type),
        DataType::UInt64 => unsigned!(UInt64Type),
        DataType::Float16 => {
            let a = array.as_primitive::<Float16Type>();
            fold(a, hashes, |i| canonical_f64(a.value(i).to_f64()))
        }
        DataType::Float32 => {
            let a = array.as_primitive::<Float32Type>();
            fold(a, hashes, |i| canonical_f64(a.value(i) as f64))
        }
        DataType::Float64 => {
            let a = array.as_primitive::<Float64Type>();
            fold(a, hashes, |i| canonical_f64(a.value(i)))
        }
        DataType::Date32 => signed!(Date32Type),
        DataType::Date64 => signed!(Date64Type),
        DataType::Time32(TimeUnit::Second) => signed!(Time32SecondType),
        DataType::Time32(_) => signed!(Time32MillisecondType),
        DataType::Time64(TimeUnit::Microsecond) => signed!(Time64MicrosecondType),
        DataType::Time64(_) => signed!(Time64NanosecondType),
        DataType::Timestamp(TimeUnit::Second, _) => signed!(TimestampSecondType),
        DataType::Timestamp(TimeUnit::Millisecond, _) => signed!(TimestampMillisecondType),
        DataType::Timestamp(TimeUnit::Microsecond, _) => signed!(TimestampMicrosecondType),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => signed!(TimestampNanosecondType),
        DataType::Duration(TimeUnit::Second) => signed!(DurationSecondType),
        DataType::Duration(TimeUnit::Millisecond) => signed!(DurationMillisecondType),
        DataType::Duration(TimeUnit::Microsecond) => signed!(DurationMicrosecondType),
        DataType::Duration(TimeUnit::Nanosecond) => signed!(DurationNanosecondType),
        DataType::Interval(IntervalUnit::YearMonth) => signed!(IntervalYearMonthType),
        DataType::Utf8 => {
            let a = array.as_string::<i32>();
            fold(a, hashes, |i| a.value(i).as_bytes())
        }
        DataType::LargeUtf8 => {
            let a = array.as_string::<i64>();
            fold(a, hashes, |i| a.value(i).as_bytes())
        }
        DataType::Utf8View => {
            let a = array.as_string_view();
            fold(a, hashes, |i| a.value(i).as_bytes())
        }
        DataType::Binary => {
            let a = array.as_binary::<i32>();
            fold(a, hashes, |i| a.value(i))
        }
        DataType::LargeBinary => {
            let a = array.as_binary::<i64>();
            fold(a, hashes, |i| a.value(i))
        }
        DataType::BinaryView => {
            let a = array.as_binary_view();
            fold(a, hashes, |i| a.value(i))
        }
        DataType::FixedSizeBinary(_) => {
            let a = array.as_fixed_size_binary();
            fold(a, hashes, |i| a.value(i))
        }
        DataType::Decimal128(..) => {
            let a = array.as_primitive::<Decimal128Type>();
            fold(a, hashes, |i| a.value(i).to_le_bytes())
        }
        DataType::Decimal256(..) => {
            let a = array.as_primitive::<Decimal256Type>();
            fold(a, hashes, |i| a.value(i).to_le_bytes())
        }
        DataType::Dictionary(_, values) => {
            let plain = arrow::compute::cast(array, values)?;
            hash_column(plain.as_ref(), hashes)?
        }
        _ => {
            let format = arrow::util::display::FormatOptions::default();
            let text = arrow::util::display::ArrayFormatter::try_new(array, &format)?;
            fold(array, hashes, |i| text.value(i).to_string().into_bytes())
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::*;
    use std::sync::Arc;

    fn one(array: ArrayRef) -> Vec<u64> {
        hash_arrays(&[array.as_ref()], array.len()).unwrap()
    }

    /// The hash is part of the checkpoint format: these values must never change within
    /// a `KEY_HASH_VERSION`. A failure here means restored state would land on the wrong
    /// subtasks. The values were computed independently from the documented algorithm
    /// with Python's `xxhash` package (`xxh3_64_intdigest(bytes, seed=h)`).
    #[test]
    fn hash_values_are_pinned() {
        let ints = one(Arc::new(Int64Array::from(vec![
            Some(0),
            Some(1),
            Some(-7),
            None,
        ])));
        let text = one(Arc::new(StringArray::from(vec![Some("auction"), Some("")])));
        let two = hash_arrays(
            &[
                &Int32Array::from(vec![42]) as &dyn Array,
                &StringArray::from(vec!["x"]),
            ],
            1,
        )
        .unwrap();
        let pinned: Vec<u64> = ints.into_iter().chain(text).chain(two).collect();
        assert_eq!(
            pinned,
            [
                0x6708_aa49_baeb_07b7,
                0xbe8a_6832_54a6_70f9,
                0xab3c_5829_bb22_7406,
                0x8ee2_fe9c_726c_360a,
                0xca94_6a9f_6af0_babb,
                0x3200_4493_a1f4_7cd2,
                0x4da6_dcc2_176c_f2cc,
            ],
            "{pinned:#018x?}"
        );
        assert_eq!(hash_arrays(&[], 2).unwrap(), vec![SEED, SEED]);
    }

    #[test]
    fn equal_values_of_related_types_hash_alike() {
        let i64s = one(Arc::new(Int64Array::from(vec![Some(5), None, Some(-1)])));
        let i32s = one(Arc::new(Int32Array::from(vec![Some(5), None, Some(-1)])));
        let i8s = one(Arc::new(Int8Array::from(vec![Some(5), None, Some(-1)])));
        assert_eq!(i64s, i32s);
        assert_eq!(i64s, i8s);
        let utf8 = one(Arc::new(StringArray::from(vec!["a", "bc"])));
        let large = one(Arc::new(LargeStringArray::from(vec!["a", "bc"])));
        let view = one(Arc::new(StringViewArray::from(vec!["a", "bc"])));
        let dict: DictionaryArray<Int32Type> = vec!["a", "bc"].into_iter().collect();
        assert_eq!(utf8, large);
        assert_eq!(utf8, view);
        assert_eq!(utf8, one(Arc::new(dict)));
        let floats = one(Arc::new(Float64Array::from(vec![
            0.0,
            -0.0,
            f64::NAN,
            -f64::NAN,
        ])));
        assert_eq!(floats[0], floats[1]);
        assert_eq!(floats[2], floats[3]);
        let f32s = one(Arc::new(Float32Array::from(vec![
            0.0,
            -0.0,
            f32::NAN,
            -f32::NAN,
        ])));
        assert_eq!(floats, f32s);
    }

    #[test]
    fn null_empty_and_column_order_are_told_apart() {
        let s = one(Arc::new(StringArray::from(vec![None, Some("")])));
        assert_ne!(s[0], s[1]);
        let a = Int64Array::from(vec![1]);
        let b = Int64Array::from(vec![2]);
        let ab = hash_arrays(&[&a as &dyn Array, &b], 1).unwrap();
        let ba = hash_arrays(&[&b as &dyn Array, &a], 1).unwrap();
        assert_ne!(ab, ba);
        // One NULL column is not the same key as no column.
        let n = hash_arrays(&[&Int64Array::from(vec![None::<i64>]) as &dyn Array], 1).unwrap();
        assert_ne!(n[0], SEED);
    }

    #[test]
    fn nested_types_hash_by_their_text() {
        let list = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            Some(vec![Some(1), Some(2)]),
            Some(vec![Some(2), Some(1)]),
            None,
        ]);
        let h = one(Arc::new(list));
        assert_eq!(h[0], h[1]);
        assert_ne!(h[0], h[2]);
        assert_ne!(h[0], h[3]);
    }

    #[test]
    fn key_groups_spread_over_subtasks_in_ranges() {
        assert_eq!(key_group(1000, 128), 1000 % 128);
        let owners: Vec<usize> = (0..128)
            .map(|kg| subtask_for_key_group(kg, 3, 128))
            .collect();
        assert_eq!(owners.first(), Some(&0));
        assert_eq!(owners.last(), Some(&2));
        assert!(owners.windows(2).all(|w| w[0] <= w[1]));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn keys() -> impl Strategy<Value = Vec<Option<i64>>> {
            proptest::collection::vec(proptest::option::weighted(0.9, any::<i64>()), 1..64)
        }

        proptest! {
            /// Every key group has an owner at every parallelism; each subtask owns one
            /// contiguous range of groups, the ranges in subtask order, their sizes within
            /// one of each other (Flink's ranges).
            #[test]
            fn key_groups_split_into_contiguous_balanced_ranges(
                max in 1usize..=4096,
                p in 1usize..=64,
            ) {
                let p = p.min(max);
                let owners: Vec<usize> =
                    (0..max).map(|kg| subtask_for_key_group(kg, p, max)).collect();
                prop_assert!(owners.windows(2).all(|w| w[0] <= w[1] && w[1] - w[0] <= 1));
                prop_assert_eq!(owners[0], 0);
                prop_assert_eq!(owners[max - 1], p - 1);
                let mut sizes = vec![0usize; p];
                for o in &owners {
                    sizes[*o] += 1;
                }
                let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                prop_assert!(hi - lo <= 1, "range sizes {:?}", sizes);
                // Each subtask's range holds exactly the groups it owns.
                for (s, size) in sizes.iter().enumerate() {
                    let range = key_group_range(s, p, max);
                    prop_assert_eq!(range.len(), *size);
                    prop_assert!(range.clone().all(|kg| owners[kg] == s), "{:?}", range);
                }
            }

            /// A key hashes the same wherever it sits: at any position of any batch, in a
            /// sliced array, as a narrower integer type, and dictionary-encoded.
            #[test]
            fn a_keys_hash_does_not_depend_on_its_batch_or_encoding(
                values in keys(),
                offset in 0usize..8,
            ) {
                let plain = one(Arc::new(Int64Array::from(values.clone())));
                for (i, v) in values.iter().enumerate() {
                    let alone = one(Arc::new(Int64Array::from(vec![*v])));
                    prop_assert_eq!(plain[i], alone[0]);
                }
                let mut padded = vec![Some(7i64); offset];
                padded.extend(values.iter().copied());
                let sliced = Int64Array::from(padded).slice(offset, values.len());
                prop_assert_eq!(&one(Arc::new(sliced)), &plain);
                let narrow: Vec<Option<i32>> =
                    values.iter().map(|v| v.map(|x| x as i32)).collect();
                let widened: Vec<Option<i64>> =
                    narrow.iter().map(|v| v.map(i64::from)).collect();
                prop_assert_eq!(
                    one(Arc::new(Int32Array::from(narrow))),
                    one(Arc::new(Int64Array::from(widened)))
                );
                let texts: Vec<Option<String>> =
                    values.iter().map(|v| v.map(|x| format!("k{}", x % 5))).collect();
                let dictionary: DictionaryArray<Int32Type> =
                    texts.iter().map(|t| t.as_deref()).collect();
                prop_assert_eq!(
                    one(Arc::new(dictionary)),
                    one(Arc::new(StringArray::from(texts.clone())))
                );
            }

            /// Key groups stay within `max_parallelism` for any hash.
            #[test]
            fn key_groups_are_below_max_parallelism(hash in any::<u64>(), max in 1usize..=32768) {
                prop_assert!(key_group(hash, max) < max);
            }
        }
    }
}
