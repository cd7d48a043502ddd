//! Weir's state layer: what a checkpoint holds ([`checkpoint`]), the key hash and key
//! groups that decide which subtask owns a key ([`key`]), and the codec of keyed operator
//! state ([`keyed`]).
//!
//! The key hash and the snapshot formats are persisted in checkpoints and savepoints, so
//! everything here is versioned ([`checkpoint::FORMAT_VERSION`], [`key::KEY_HASH_VERSION`])
//! and pinned by tests; a savepoint written by this version is kept in the repository
//! (`tests/data/savepoint-v4`) and must keep restoring.

pub mod checkpoint;
pub mod key;
pub mod keyed;

pub use checkpoint::{CheckpointMetadata, OperatorState, StateDistribution, SubtaskStatus};
