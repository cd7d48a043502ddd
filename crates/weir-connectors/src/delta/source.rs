//! The Delta source: a bounded read of a table's latest snapshot.

use super::{SOURCE_OPTIONS, delta_error, has_log, log_store, schema_differences};
use arrow::array::Array;
use arrow::datatypes::SchemaRef;
use deltalake_core::DeltaTable;
use deltalake_core::kernel::StructType;
use deltalake_core::kernel::engine::arrow_conversion::TryIntoKernel;
use object_store::path::Path;
use std::sync::Arc;
use weir_common::{ConnectorOptions, Error, Result};

/// The source of a Delta table: a bounded read of its latest snapshot. Its data files
/// are read as the filesystem source reads Parquet files (a split per file, resumed
/// mid-file after a restore); partition columns take each file's values from the log.
pub async fn source(
    options: &ConnectorOptions,
    schema: SchemaRef,
) -> Result<crate::filesystem::FileSourceFactory> {
    options.check_known("delta", SOURCE_OPTIONS)?;
    let location = options.required("path")?.to_string();
    let table_name = options.table.clone();
    let resolved = weir_runtime::storage::resolve(
        &location,
        false,
        &crate::filesystem::s3_settings(options)?,
    )?;
    let (store, root) = (resolved.store, resolved.path);
    if !has_log(store.as_ref(), &root).await? {
        return Err(Error::input(format!(
            "table '{table_name}': '{location}' holds no Delta table (no '_delta_log')"
        )));
    }
    let log_store = log_store(&store, &root, resolved.local.as_deref(), &location)?;
    let mut table = DeltaTable::new(log_store);
    table
        .load()
        .await
        .map_err(|e| delta_error(&table_name, &location, e))?;
    let snapshot = table
        .snapshot()
        .map_err(|e| delta_error(&table_name, &location, e))?;
    let wanted: StructType = schema.as_ref().try_into_kernel().map_err(|e| {
        Error::config(format!(
            "table '{table_name}': a column's type has no Delta equivalent: {e}"
        ))
    })?;
    let problems = schema_differences(&snapshot.schema(), &wanted, false);
    if !problems.is_empty() {
        return Err(Error::config(format!(
            "table '{table_name}': the Delta table at '{location}' does not match its \
             declaration: {}",
            problems.join("; ")
        )));
    }
    let mapping = snapshot
        .metadata()
        .configuration()
        .get("delta.columnMapping.mode");
    if mapping.is_some_and(|m| m != "none") {
        return Err(Error::config(format!(
            "table '{table_name}': the Delta table at '{location}' maps column names \
             ('delta.columnMapping.mode'), which Weir does not read yet"
        )));
    }
    // The partition columns the DDL declares, in the DDL's order.
    let partitions = snapshot.metadata().partition_columns();
    let constant: Vec<(usize, String)> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| partitions.contains(f.name()))
        .map(|(i, f)| (i, f.name().clone()))
        .collect();
    let mut files = Vec::new();
    for file in snapshot.log_data().iter() {
        let relative = file.path().to_string();
        if file.deletion_vector_descriptor().is_some() {
            return Err(Error::config(format!(
                "table '{table_name}': file '{relative}' of the Delta table at '{location}' \
                 has deleted rows (a deletion vector), which Weir does not read yet"
            )));
        }
        let full = format!("{root}/{relative}");
        let path = Path::parse(full.trim_start_matches('/'))
            .map_err(|e| Error::input(format!("table '{table_name}': file '{relative}': {e}")))?;
        let values = file.partition_values_map();
        let mut columns = Vec::new();
        for (i, name) in &constant {
            let value = values.get(name).cloned().flatten();
            let text: arrow::array::ArrayRef =
                Arc::new(arrow::array::StringArray::from(vec![value.clone()]));
            let typed = arrow::compute::cast(&text, schema.field(*i).data_type())?;
            if value.is_some() && typed.is_null(0) {
                return Err(Error::input(format!(
                    "table '{table_name}': file '{relative}' has partition value {name} = \
                     '{}', which is no {}",
                    value.unwrap_or_default(),
                    schema.field(*i).data_type()
                )));
            }
            columns.push(typed);
        }
        files.push((path, columns));
    }
    let constant: Vec<usize> = constant.into_iter().map(|(i, _)| i).collect();
    Ok(crate::filesystem::FileSourceFactory::of_files(
        "delta", schema, store, location, root, &constant, files,
    ))
}
