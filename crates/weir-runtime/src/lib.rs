//! The streaming runtime: operators, sources, the job graph, tasks on tokio, exchanges,
//! aligned checkpoint barriers, the checkpoint coordinator and recovery.
//!
//! Entry point: build a [`JobGraph`] of [`SourceFactory`]s and [`OperatorFactory`]s, then
//! [`job::start`] it. Each subtask of a (chained) vertex runs as one tokio task; tasks are
//! connected by bounded channels that carry one [`Message`] stream each, so a slow sink
//! back-pressures its sources.
//!
//! This crate knows nothing of SQL text or of concrete connectors. The checkpoint protocol
//! decisions (which tasks to trigger, what a finished operator looks like, whether a graph
//! may restore from a checkpoint) are pure functions in [`plan`], tested without tokio.

pub use weir_state::checkpoint;
mod attempt;
pub mod coordinator;
pub mod exchange;
pub mod graph;
pub mod job;
pub mod lease;
pub mod message;
pub mod metrics;
pub mod operator;
pub mod plan;
pub mod remote;
mod restore;
pub mod s3_uploads;
pub mod source;
pub mod state_file;
pub mod state_io;
pub mod storage;
mod task;
#[cfg(test)]
mod tests;
mod upload;

pub use async_trait::async_trait;
pub use checkpoint::{CheckpointMetadata, OperatorState, StateDistribution, SubtaskStatus};
pub use graph::{Edge, JobGraph, Partitioning, Vertex};
pub use job::{
    JobController, JobHandle, JobOptions, JobOutcome, RestoreFrom, start, start_on_cluster,
};
pub use lease::Fence;
pub use message::{Barrier, CheckpointKind, Message, StopMode, WatermarkStatus};
pub use metrics::JobMetrics;
pub use operator::{
    Operator, OperatorFactory, Output, StreamItem, TaskInfo, committer_uid, writers_uid,
};
pub use restore::latest_of_job;
pub use source::{Source, SourceFactory, SourcePoll, SplitId};
