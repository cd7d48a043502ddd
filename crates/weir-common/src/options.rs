//! Connector options: the `WITH ('k' = 'v', …)` map of a table.

use crate::{Error, Result};
use std::collections::BTreeMap;

/// Options of one table, with the table name for error messages.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ConnectorOptions {
    pub table: String,
    pub values: BTreeMap<String, String>,
}

impl std::fmt::Debug for ConnectorOptions {
    /// Sensitive values masked: options end up in logs through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let values: BTreeMap<&str, &str> = self
            .values
            .iter()
            .map(|(k, v)| (k.as_str(), crate::redact::display_value(k, v)))
            .collect();
        f.debug_struct("ConnectorOptions")
            .field("table", &self.table)
            .field("values", &values)
            .finish()
    }
}

impl ConnectorOptions {
    pub fn new(table: impl Into<String>, values: BTreeMap<String, String>) -> Self {
        Self {
            table: table.into(),
            values,
        }
    }

    pub fn connector(&self) -> Result<&str> {
        self.get("connector").ok_or_else(|| {
            Error::config(format!("table '{}' has no 'connector' option", self.table))
        })
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    pub fn required(&self, key: &str) -> Result<&str> {
        self.get(key).ok_or_else(|| {
            Error::config(format!(
                "table '{}': missing required option '{key}'",
                self.table
            ))
        })
    }

    fn bad(&self, key: &str, what: &str) -> Error {
        Error::config(format!(
            "table '{}': option '{key}' = '{}' is invalid: expected {what}",
            self.table,
            self.get(key).unwrap_or_default()
        ))
    }

    pub fn get_u64(&self, key: &str) -> Result<Option<u64>> {
        self.get(key)
            .map(|v| {
                v.trim()
                    .parse::<u64>()
                    .map_err(|_| self.bad(key, "a non-negative integer"))
            })
            .transpose()
    }

    pub fn get_i64(&self, key: &str) -> Result<Option<i64>> {
        self.get(key)
            .map(|v| {
                v.trim()
                    .parse::<i64>()
                    .map_err(|_| self.bad(key, "an integer"))
            })
            .transpose()
    }

    pub fn get_f64(&self, key: &str) -> Result<Option<f64>> {
        self.get(key)
            .map(|v| {
                v.trim()
                    .parse::<f64>()
                    .map_err(|_| self.bad(key, "a number"))
            })
            .transpose()
    }

    pub fn get_bool(&self, key: &str) -> Result<Option<bool>> {
        self.get(key)
            .map(|v| match v.trim().to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(self.bad(key, "true or false")),
            })
            .transpose()
    }

    pub fn get_duration(&self, key: &str) -> Result<Option<std::time::Duration>> {
        self.get(key)
            .map(|v| crate::config::parse_duration(v).map_err(|_| self.bad(key, "a duration")))
            .transpose()
    }

    pub fn get_memory_size(&self, key: &str) -> Result<Option<u64>> {
        self.get(key)
            .map(|v| crate::config::parse_memory_size(v).map_err(|_| self.bad(key, "a size")))
            .transpose()
    }

    /// Rejects keys that are neither in `known` nor match one of the `patterns`
    /// (`fields.#.kind`: `#` stands for one name).
    pub fn check_known(&self, connector: &str, known: &[&str]) -> Result<()> {
        for key in self.values.keys() {
            let ok = known.iter().any(|k| matches_pattern(k, key));
            if !ok {
                return Err(Error::config(format!(
                    "table '{}': unknown option '{key}' for connector '{connector}'; valid options: {}",
                    self.table,
                    known.join(", ")
                )));
            }
        }
        Ok(())
    }
}

fn matches_pattern(pattern: &str, key: &str) -> bool {
    match pattern.split_once('#') {
        None => pattern == key,
        Some((pre, post)) => {
            key.len() > pre.len() + post.len()
                && key.starts_with(pre)
                && key.ends_with(post)
                && !key[pre.len()..key.len() - post.len()].is_empty()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_field_options() {
        assert!(matches_pattern("fields.#.kind", "fields.id.kind"));
        assert!(!matches_pattern("fields.#.kind", "fields.id.min"));
        assert!(matches_pattern("connector", "connector"));
    }
}
