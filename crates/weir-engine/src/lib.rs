#![warn(missing_docs)]
//! The engine: sessions that execute SQL statements ([`Engine`]), the compilation of
//! planned queries into runtime job graphs ([`compile`]), and the operators that
//! implement SQL semantics ([`operators`]).
//!
//! It joins the layers below it — `weir-sql` (planning), `weir-runtime` (execution) and
//! `weir-connectors` (I/O) — which do not know each other.

pub mod batch;
mod catalog_statements;
mod catalog_store;
pub mod compile;
pub mod engine;
mod function_ddl;
pub mod operators;
pub mod udfs;

pub use batch::{BatchQuery, BatchResult};
pub use engine::{Engine, Outcome};
