//! Shared vocabulary of every Weir crate: identifiers ([`CheckpointId`], [`JobId`]),
//! the error type ([`Error`], [`Result`]), configuration ([`Config`], the Flink-named
//! `SET` keys) and connector options ([`ConnectorOptions`]).
//!
//! This crate does no I/O and knows nothing of SQL planning, operators or connectors;
//! everything above it depends on it, it depends on nothing of ours.

pub mod changelog;
pub mod config;
pub mod error;
pub mod failpoint;
pub mod ids;
pub mod java_text;
pub mod options;
pub mod redact;
pub mod restart;

pub use changelog::RowKind;
pub use config::{Config, RuntimeMode};
pub use error::{Error, Result, SqlLocation};
pub use failpoint::{failpoint, failpoint_delay};
pub use ids::{CheckpointId, JobId};
pub use options::ConnectorOptions;
pub use restart::{Backoff, RestartStrategy};

/// Processing time: milliseconds since the Unix epoch by the wall clock.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// FNV-1a: a short, stable hash of a name (sink tags, file owners); the same in every
/// process and version, unlike the standard library's hasher.
pub fn fnv32(text: &str) -> u32 {
    text.bytes()
        .fold(0x811c_9dc5, |h, b| (h ^ b as u32).wrapping_mul(0x0100_0193))
}

/// The watermark that means "no more data will ever arrive" (Flink's `Long.MAX_VALUE`).
pub const MAX_WATERMARK: i64 = i64::MAX;
