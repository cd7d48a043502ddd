//! Connectors: sources, sinks and formats, and the two-phase-commit sink framework
//! ([`two_phase`]). Connector and option names follow Flink's.
//!
//! Entry points: [`create_source`] and [`create_sink`] turn a table's `WITH` options and
//! schema into runtime factories; [`validate_options`] checks options when a table is
//! declared. This crate knows nothing of SQL planning.

pub mod blackhole;
pub mod collect;
pub mod datagen;
pub mod delta;
pub mod filesystem;
pub mod kafka;
pub mod memory;
mod metadata;
pub mod nexmark;
pub mod print;
mod split;
pub mod two_phase;

use arrow::datatypes::SchemaRef;
use std::sync::Arc;
use weir_common::{ConnectorOptions, Error, Result};
use weir_runtime::{OperatorFactory, SourceFactory};

/// Every connector, with the options it accepts as a source and as a sink.
pub const CONNECTORS: &[(&str, &[&str], &[&str])] = &[
    ("datagen", datagen::OPTIONS, &[]),
    ("delta", delta::SOURCE_OPTIONS, delta::OPTIONS),
    (
        "filesystem",
        filesystem::SOURCE_OPTIONS,
        filesystem::SINK_OPTIONS,
    ),
    ("kafka", kafka::SOURCE_OPTIONS, kafka::sink::SINK_OPTIONS),
    (
        "upsert-kafka",
        kafka::UPSERT_SOURCE_OPTIONS,
        kafka::sink::UPSERT_SINK_OPTIONS,
    ),
    ("memory", memory::OPTIONS, &[]),
    ("nexmark", nexmark::OPTIONS, &[]),
    ("print", &[], print::OPTIONS),
    ("blackhole", &[], blackhole::OPTIONS),
];

fn lookup(
    options: &ConnectorOptions,
) -> Result<&'static (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
)> {
    let name = options.connector()?;
    CONNECTORS.iter().find(|c| c.0 == name).ok_or_else(|| {
        let names: Vec<_> = CONNECTORS.iter().map(|c| c.0).collect();
        Error::config(format!(
            "table '{}': unknown connector '{name}'; available connectors: {}",
            options.table,
            names.join(", ")
        ))
    })
}

/// Checks, when a table is declared, that its connector exists, every option is one the
/// connector knows (as a source or as a sink) and the options make sense for the table's
/// physical columns (a known format; datagen ranges that are not empty), so that mistakes
/// surface at `CREATE TABLE`, not when the table is first used.
pub fn validate_options(
    options: &ConnectorOptions,
    physical: SchemaRef,
    primary_key: &[String],
) -> Result<()> {
    let (name, source, sink) = lookup(options)?;
    let mut all: Vec<&str> = source.iter().chain(sink.iter()).copied().collect();
    all.sort();
    all.dedup();
    options.check_known(name, &all)?;
    match *name {
        "filesystem" => filesystem::format::Format::from_options(options).map(|_| ()),
        "kafka" => kafka::value_format(options).map(|_| ()),
        "upsert-kafka" => kafka::check_upsert(options, &physical, primary_key),
        "datagen" => datagen::DatagenSourceFactory::new(options, physical).map(|_| ()),
        _ => Ok(()),
    }
}

/// The source of a table read by a query.
/// The source of a table: `schema` holds its physical columns, `metadata` says which of
/// them are metadata columns and their connector keys (`file.name`, …).
pub async fn create_source(
    options: &ConnectorOptions,
    schema: SchemaRef,
    metadata: &[(String, String)],
    primary_key: &[String],
) -> Result<Arc<dyn SourceFactory>> {
    let (name, ..) = lookup(options)?;
    if !["filesystem", "kafka", "upsert-kafka"].contains(name)
        && let Some((column, key)) = metadata.first()
    {
        return Err(Error::config(format!(
            "table '{}': column '{column}' reads metadata '{key}', but connector '{name}' has \
             no metadata",
            options.table
        )));
    }
    match *name {
        "datagen" => Ok(Arc::new(datagen::DatagenSourceFactory::new(
            options, schema,
        )?)),
        "filesystem" => Ok(Arc::new(
            filesystem::FileSourceFactory::try_new(options, schema, metadata).await?,
        )),
        "delta" => Ok(Arc::new(delta::source(options, schema).await?)),
        "nexmark" => Ok(Arc::new(nexmark::NexmarkSourceFactory::new(
            options, schema,
        )?)),
        "kafka" => Ok(Arc::new(
            kafka::source::KafkaSourceFactory::try_new(options, schema, metadata, None).await?,
        )),
        "upsert-kafka" => Ok(Arc::new(
            kafka::source::KafkaSourceFactory::try_new(
                options,
                schema,
                metadata,
                Some(primary_key),
            )
            .await?,
        )),
        "memory" => Ok(Arc::new(memory::MemorySourceFactory::new(options, schema)?)),
        other => Err(Error::config(format!(
            "table '{}': connector '{other}' can only be written to, not read",
            options.table
        ))),
    }
}

/// Checks that a table can be overwritten (`INSERT OVERWRITE`): the filesystem sink.
pub fn check_overwrite(options: &ConnectorOptions) -> Result<()> {
    let (name, ..) = lookup(options)?;
    if matches!(*name, "filesystem" | "delta") {
        return Ok(());
    }
    Err(Error::plan(format!(
        "INSERT OVERWRITE '{}': connector '{name}' cannot be overwritten (the filesystem \
         and delta connectors can)",
        options.table
    )))
}

/// Checks that a table can take the rows of a query: `updates` names the operator that
/// makes the query's result an updating one (a changelog with `-U`/`+U`/`-D` rows), if any,
/// and only `print`, `blackhole`, `upsert-kafka`, and files and Kafka topics in
/// `debezium-json` or `canal-json` can take updates.
pub fn check_changelog(options: &ConnectorOptions, updates: Option<&str>) -> Result<()> {
    let (name, ..) = lookup(options)?;
    let Some(producer) = updates else {
        return Ok(());
    };
    let takes = match *name {
        "print" | "blackhole" => true,
        "filesystem" => filesystem::format::Format::from_options(options)?.takes_changelog(),
        "kafka" => kafka::value_format(options)?.takes_changelog(),
        "upsert-kafka" => true,
        _ => false,
    };
    if takes {
        return Ok(());
    }
    if *name == "delta" {
        return Err(Error::plan(format!(
            "table '{}' (connector 'delta') can only take appended rows, but the query updates \
             rows it has already written ({producer} produces -U/+U/-D changes); Weir does not \
             merge updates into Delta tables: use a window aggregate, or write the changelog \
             to a filesystem table with 'format' = 'debezium-json'",
            options.table
        )));
    }
    let format = options
        .get("format")
        .map(|f| format!(" with format '{f}'"))
        .unwrap_or_default();
    Err(Error::plan(format!(
        "table '{}' (connector '{name}'{format}) can only take appended rows, but the query \
         updates rows it has already written ({producer} produces -U/+U/-D changes); write to a \
         table with 'format' = 'debezium-json' or 'canal-json', to an 'upsert-kafka' table or to \
         'print'/'blackhole', or use a window aggregate",
        options.table
    )))
}

/// The sink of a table written by `INSERT INTO`; `updates` as for [`check_changelog`].
pub async fn create_sink(
    options: &ConnectorOptions,
    schema: SchemaRef,
    partitioned_by: &[String],
    primary_key: &[String],
    metadata: &[(String, String)],
    updates: Option<&str>,
    overwrite: bool,
) -> Result<Arc<dyn OperatorFactory>> {
    let (name, ..) = lookup(options)?;
    check_changelog(options, updates)?;
    let writable: &[&str] = match *name {
        "kafka" | "upsert-kafka" => kafka::sink::WRITABLE_METADATA,
        _ => &[],
    };
    if let Some((column, key)) = metadata
        .iter()
        .find(|(_, k)| !writable.contains(&k.as_str()))
    {
        return Err(Error::plan(format!(
            "INSERT INTO '{}': column '{column}' is METADATA FROM '{key}', which connector \
             '{name}' cannot write{}; declare it VIRTUAL to leave it out of writes",
            options.table,
            match writable {
                [] => String::new(),
                keys => format!(" (it writes {})", keys.join(", ")),
            }
        )));
    }
    match *name {
        "print" => Ok(Arc::new(print::PrintSinkFactory::new(options)?)),
        "blackhole" => {
            options.check_known("blackhole", blackhole::OPTIONS)?;
            Ok(Arc::new(blackhole::BlackholeSinkFactory))
        }
        "filesystem" => {
            let sink = filesystem::FileSink::try_new(options, schema, partitioned_by).await?;
            Ok(Arc::new(two_phase::TwoPhaseCommitSinkFactory(Arc::new(
                sink,
            ))))
        }
        "delta" => {
            let sink =
                delta::DeltaSink::try_new(options, schema, partitioned_by, overwrite).await?;
            Ok(Arc::new(two_phase::GlobalCommitSinkFactory(Arc::new(sink))))
        }
        "kafka" => Ok(Arc::new(kafka::sink::KafkaSinkFactory::try_new(
            options, schema, metadata, None,
        )?)),
        "upsert-kafka" => Ok(Arc::new(kafka::sink::KafkaSinkFactory::try_new(
            options,
            schema,
            metadata,
            Some(primary_key),
        )?)),
        other => Err(Error::config(format!(
            "table '{}': connector '{other}' can only be read, not written to",
            options.table
        ))),
    }
}
