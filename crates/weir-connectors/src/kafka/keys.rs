//! Message keys, with Flink's options: `key.format` (its options as `key.json.*`, …),
//! `key.fields` (the physical columns the key holds, `;`-separated, in key order),
//! `key.fields-prefix` (a prefix the key's columns carry in the table but not in the key)
//! and `value.fields-include` (`ALL`: the value holds every physical column, key columns
//! too; `EXCEPT_KEY`: the value holds the others).
//!
//! Reading, a key column comes from the key with `EXCEPT_KEY` and from the value with
//! `ALL` (as in Flink, where the value's field wins). Writing, the key is encoded from the
//! key columns and the value from the columns `value.fields-include` names.

use crate::filesystem::format::Format;
use arrow::datatypes::{Field, Schema, SchemaRef};
use std::sync::Arc;
use weir_common::{ConnectorOptions, Error, Result};

/// The formats a key can have.
const KEY_FORMATS: &[&str] = &["json", "csv", "raw", "avro"];

/// The key of a table's messages.
#[derive(Debug, Clone)]
pub(crate) struct Key {
    pub format: Format,
    /// Indices of the key columns in the physical schema, in key order.
    pub fields: Vec<usize>,
    /// What the key format sees: the key columns without `key.fields-prefix`.
    pub schema: SchemaRef,
    /// The key's Avro layout, when its format is `avro`.
    pub avro: Option<crate::filesystem::avro::AvroLayout>,
}

/// Which physical columns the key and the value of a message hold.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub key: Option<Key>,
    /// Indices of the value's columns in the physical schema.
    pub value_fields: Vec<usize>,
    /// The value's columns.
    pub value_schema: SchemaRef,
}

impl Layout {
    /// Whether the value holds every physical column (nothing to project).
    pub fn value_is_whole(&self, physical: &Schema) -> bool {
        self.value_fields.len() == physical.fields().len()
    }
}

/// The layout of a table whose physical columns are `physical`; an `upsert-kafka` table
/// (`primary_key` given) has the primary key as its key.
pub(crate) fn layout(
    options: &ConnectorOptions,
    physical: &SchemaRef,
    primary_key: Option<&[String]>,
) -> Result<Layout> {
    let table = &options.table;
    if let Some(pk) = primary_key {
        if pk.is_empty() {
            return Err(Error::config(format!(
                "table '{table}': 'upsert-kafka' tables need a PRIMARY KEY (… NOT ENFORCED): \
                 its columns are the message key, and rows with the same key update or \
                 delete each other"
            )));
        }
        for required in ["key.format", "value.format"] {
            options.required(required)?;
        }
    }
    let key_fields = match primary_key {
        Some(pk) => Some(pk.join(";")),
        None => options.get("key.fields").map(str::to_string),
    };
    let except_key = match options.get("value.fields-include") {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("ALL") => false,
        Some(v) if v.eq_ignore_ascii_case("EXCEPT_KEY") => true,
        Some(v) => {
            return Err(Error::config(format!(
                "table '{table}': invalid 'value.fields-include' '{v}'; expected ALL or EXCEPT_KEY"
            )));
        }
    };
    let prefix = options.get("key.fields-prefix").unwrap_or_default();
    let key = match (options.get("key.format"), key_fields.as_deref()) {
        (None, None) => None,
        (Some(_), None) => {
            return Err(Error::config(format!(
                "table '{table}': 'key.format' needs 'key.fields' (the columns the key holds)"
            )));
        }
        (None, Some(_)) => {
            return Err(Error::config(format!(
                "table '{table}': 'key.fields' needs 'key.format'"
            )));
        }
        (Some(_), Some(names)) => {
            let mut fields = Vec::new();
            let mut key_fields = Vec::new();
            for name in names.split(';').map(str::trim).filter(|n| !n.is_empty()) {
                let index = physical.index_of(name).map_err(|_| {
                    Error::config(format!(
                        "table '{table}': 'key.fields' names '{name}', which is not a physical \
                         column of the table ({})",
                        physical
                            .fields()
                            .iter()
                            .map(|f| f.name().as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
                let unprefixed = name.strip_prefix(prefix).ok_or_else(|| {
                    Error::config(format!(
                        "table '{table}': key column '{name}' does not start with \
                         'key.fields-prefix' '{prefix}'"
                    ))
                })?;
                let field = physical.field(index);
                key_fields.push(Field::new(
                    unprefixed,
                    field.data_type().clone(),
                    field.is_nullable(),
                ));
                fields.push(index);
            }
            if fields.is_empty() {
                return Err(Error::config(format!(
                    "table '{table}': 'key.fields' is empty"
                )));
            }
            let schema = Arc::new(Schema::new(key_fields));
            let format = super::parse_format(options, "key.format", "key.", KEY_FORMATS)?;
            if matches!(format, Format::Raw) {
                crate::filesystem::format::raw_column(&schema)?;
            }
            let avro = match format {
                Format::Avro(_) => Some(crate::filesystem::avro::AvroLayout::new(&schema)?),
                _ => None,
            };
            Some(Key {
                format,
                fields,
                schema,
                avro,
            })
        }
    };
    if !prefix.is_empty() && !except_key {
        return Err(Error::config(format!(
            "table '{table}': 'key.fields-prefix' needs 'value.fields-include' = 'EXCEPT_KEY'"
        )));
    }
    let value_fields: Vec<usize> = match (&key, except_key) {
        (Some(key), true) => (0..physical.fields().len())
            .filter(|i| !key.fields.contains(i))
            .collect(),
        (None, true) => {
            return Err(Error::config(format!(
                "table '{table}': 'value.fields-include' = 'EXCEPT_KEY' needs a key \
                 ('key.format' and 'key.fields')"
            )));
        }
        (_, false) => (0..physical.fields().len()).collect(),
    };
    let value_schema = Arc::new(physical.project(&value_fields)?);
    Ok(Layout {
        key,
        value_fields,
        value_schema,
    })
}
