//! `'connector' = 'filesystem'`: bounded reads of Parquet, CSV and JSON files, and an
//! exactly-once file sink (two-phase commit) on the local file system or any object store.

mod format;
mod sink;
mod source;

pub use format::Format;
pub use sink::FileSink;
pub use source::FileSourceFactory;

pub const SOURCE_OPTIONS: &[&str] = &[
    "connector",
    "path",
    "format",
    "csv.field-delimiter",
    "csv.ignore-first-line",
    "source.monitor-interval",
];

pub const SINK_OPTIONS: &[&str] = &[
    "connector",
    "path",
    "format",
    "csv.field-delimiter",
    "sink.rolling-policy.file-size",
    "sink.rolling-policy.rollover-interval",
    "sink.rolling-policy.check-interval",
];
