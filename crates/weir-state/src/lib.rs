//! Weir's state layer: what a checkpoint holds ([`checkpoint`]), the key hash and key
//! groups that decide which subtask owns a key ([`key`]), the codec of keyed operator
//! state ([`keyed`]), per-group columns operators overwrite in place ([`columns`]), and
//! stored rows that move to local disk when the job's state outgrows its memory
//! budget ([`spill`]), and keyed entries that do ([`cold`]).
//!
//! The key hash and the snapshot formats are persisted in checkpoints and savepoints, so
//! everything here is versioned ([`checkpoint::FORMAT_VERSION`], [`key::KEY_HASH_VERSION`])
//! and pinned by tests; a savepoint written by this version is kept in the repository
//! (`tests/data/savepoint-v4`) and must keep restoring.

pub mod checkpoint;
pub mod cold;
pub mod columns;
pub mod key;
pub mod keyed;
pub mod spill;

pub use checkpoint::{CheckpointMetadata, OperatorState, StateDistribution, SubtaskStatus};
