//! The one integration-test binary. Every test runs the real `weir` executable on real
//! files; crash tests kill it with SIGKILL (or abort it at armed failpoints) and restart it.

mod avro;
mod ballista;
mod batch;
mod catalogs;
mod cluster;
mod common;
mod crash;
mod delta;
mod errors;
mod finishing;
mod flink;
mod golden;
mod kafka;
mod library;
mod lookup;
mod match_recognize;
mod nexmark;
mod over;
mod parity;
mod pipeline;
mod recovery;
mod restarts;
mod s3;
mod savepoint;
mod shell;
mod sources;
mod spill;
mod state;
mod web;
mod windows;
