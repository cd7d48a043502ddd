//! `'connector' = 'filesystem'`: bounded reads of Parquet, CSV and JSON files, and an
//! exactly-once file sink (two-phase commit) on the local file system or any object store.

pub mod avro;
mod cdc;
pub mod format;
pub mod overwrite;
mod sink;
mod source;
pub mod text;

pub use format::Format;
pub use sink::FileSink;
pub use source::FileSourceFactory;

/// The options the filesystem source and sink share (format and S3 settings), then `$extra`.
macro_rules! file_options {
    ($($extra:literal),*) => {
        &[
            "connector",
            "path",
            "format",
            "csv.field-delimiter",
            "csv.ignore-first-line",
            "csv.quote-character",
            "csv.disable-quote-character",
            "csv.escape-character",
            "csv.allow-comments",
            "csv.ignore-parse-errors",
            "csv.null-literal",
            "csv.array-element-delimiter",
            "json.ignore-parse-errors",
            "json.fail-on-missing-field",
            "json.timestamp-format.standard",
            "json.map-null-key.mode",
            "json.map-null-key.literal",
            "debezium-json.timestamp-format.standard",
            "debezium-json.ignore-parse-errors",
            "debezium-json.schema-include",
            "canal-json.ignore-parse-errors",
            "canal-json.timestamp-format.standard",
            "maxwell-json.ignore-parse-errors",
            "maxwell-json.timestamp-format.standard",
            "raw.charset",
            "avro.codec",
            "raw.endianness",
            "debezium-json.map-null-key.mode",
            "debezium-json.map-null-key.literal",
            "s3.access-key",
            "s3.secret-key",
            "s3.endpoint",
            "s3.region",
            "s3.retry.timeout",
            $($extra),*
        ]
    };
}

pub const SOURCE_OPTIONS: &[&str] =
    file_options!("source.monitor-interval", "lookup.join.cache.ttl");

pub const SINK_OPTIONS: &[&str] = file_options!(
    "sink.rolling-policy.file-size",
    "sink.rolling-policy.rollover-interval",
    "sink.rolling-policy.check-interval"
);

/// S3 settings from table options (they override the `AWS_*` environment variables and
/// are never logged nor stored in checkpoints).
/// What goes before an object-store path to show it as the user wrote the table's `path`
/// (object-store paths have no leading `/` and no bucket): `/` for local files,
/// `s3://bucket/` for S3.
pub(crate) fn shown_root(location: &str) -> String {
    match location.split_once("://") {
        Some((scheme, rest)) if scheme != "file" => {
            format!("{scheme}://{}/", rest.split('/').next().unwrap_or_default())
        }
        _ => "/".to_string(),
    }
}

pub(crate) fn s3_settings(
    options: &weir_common::ConnectorOptions,
) -> weir_common::Result<weir_runtime::storage::S3Settings> {
    Ok(weir_runtime::storage::S3Settings {
        access_key: options.get("s3.access-key").map(str::to_string),
        secret_key: options.get("s3.secret-key").map(str::to_string),
        endpoint: options.get("s3.endpoint").map(str::to_string),
        region: options.get("s3.region").map(str::to_string),
        retry_timeout: options.get_duration("s3.retry.timeout")?,
    })
}
