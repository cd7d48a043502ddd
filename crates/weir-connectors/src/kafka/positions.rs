//! Where a Kafka read starts and ends: Flink's `scan.startup.*` and `scan.bounded.*`
//! options, and the table's topics.

use regex::Regex;
use std::collections::BTreeMap;
use weir_common::{ConnectorOptions, Error, Result};

/// The topics of a table.
#[derive(Debug, Clone)]
pub(super) enum Topics {
    List(Vec<String>),
    /// `topic-pattern`: topics whose whole name matches.
    Pattern(Regex),
}

/// `scan.startup.mode` and `scan.bounded.mode` positions.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Position {
    Earliest,
    Latest,
    GroupOffsets,
    Timestamp(i64),
    /// `partition:0,offset:42;partition:1,offset:300` (unlisted partitions: `Earliest`
    /// at startup, `Latest` as a bound).
    Specific(BTreeMap<i32, i64>),
}

pub(super) fn parse_position(options: &ConnectorOptions, prefix: &str) -> Result<Option<Position>> {
    let mode_key = format!("{prefix}.mode");
    let Some(mode) = options.get(&mode_key) else {
        return Ok(None);
    };
    let table = &options.table;
    let needs = |key: &str| -> Result<&str> {
        options.get(key).ok_or_else(|| {
            Error::config(format!(
                "table '{table}': '{mode_key}' = '{mode}' needs the option '{key}'"
            ))
        })
    };
    let bounded = prefix == "scan.bounded";
    Ok(Some(match mode.to_ascii_lowercase().as_str() {
        "earliest-offset" if !bounded => Position::Earliest,
        "latest-offset" => Position::Latest,
        "group-offsets" if !bounded => Position::GroupOffsets,
        "unbounded" if bounded => return Ok(None),
        "timestamp" => {
            let key = format!("{prefix}.timestamp-millis");
            needs(&key)?;
            Position::Timestamp(options.get_i64(&key)?.unwrap_or_default())
        }
        "specific-offsets" => {
            let key = format!("{prefix}.specific-offsets");
            Position::Specific(parse_specific_offsets(table, &key, needs(&key)?)?)
        }
        _ => {
            let modes = if bounded {
                "unbounded, latest-offset, timestamp, specific-offsets"
            } else {
                "earliest-offset, latest-offset, group-offsets, timestamp, specific-offsets"
            };
            return Err(Error::config(format!(
                "table '{table}': invalid '{mode_key}' '{mode}'; expected one of: {modes}"
            )));
        }
    }))
}

/// Flink's `partition:0,offset:42;partition:1,offset:300`.
fn parse_specific_offsets(table: &str, key: &str, spec: &str) -> Result<BTreeMap<i32, i64>> {
    let mut offsets = BTreeMap::new();
    for (i, entry) in spec.split(';').filter(|e| !e.trim().is_empty()).enumerate() {
        let bad = || {
            Error::config(format!(
                "table '{table}': option '{key}' entry {} '{}' is invalid: expected \
                 'partition:<n>,offset:<n>' (entries separated by ';')",
                i + 1,
                entry.trim()
            ))
        };
        let (p, o) = entry.split_once(',').ok_or_else(bad)?;
        let number = |part: &str, name: &str| -> Option<i64> {
            let (k, v) = part.split_once(':')?;
            (k.trim() == name).then_some(())?;
            v.trim().parse::<i64>().ok().filter(|n| *n >= 0)
        };
        let partition = number(p, "partition").ok_or_else(bad)?;
        let offset = number(o, "offset").ok_or_else(bad)?;
        offsets.insert(i32::try_from(partition).map_err(|_| bad())?, offset);
    }
    if offsets.is_empty() {
        return Err(Error::config(format!(
            "table '{table}': option '{key}' names no partition"
        )));
    }
    Ok(offsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specific_offsets_are_parsed_and_bad_entries_named() {
        let ok = parse_specific_offsets("t", "k", "partition:0,offset:42;partition:1,offset:300")
            .unwrap();
        assert_eq!(ok, BTreeMap::from([(0, 42), (1, 300)]));
        let err = parse_specific_offsets("t", "k", "partition:0,offset:42;partition:x,offset:1")
            .unwrap_err()
            .to_string();
        assert!(err.contains("entry 2 'partition:x,offset:1'"), "{err}");
        assert!(parse_specific_offsets("t", "k", " ; ").is_err());
    }
}
