//! SQL front end: the Flink dialect, DDL parsing, the catalog, and planning with
//! DataFusion into a [`StreamPlan`] — a description of the streaming job that the engine
//! turns into runtime operators.
//!
//! Entry point: [`Planner`]. This crate does not depend on the runtime: its output is
//! plain data (table definitions, DataFusion physical expressions, node kinds).

pub mod batch_distinct;
pub mod batch_sessions;
pub mod batch_statistics;
pub mod catalog;
pub mod catalog_ddl;
pub mod current_watermark;
pub mod ddl;
pub mod dialect;
mod dialect_functions;
pub mod flink_cast;
pub mod flink_collect;
pub mod flink_decimal;
pub mod flink_functions;
pub mod flink_json;
pub mod flink_scalars;
pub mod flink_types;
pub mod functions;
pub mod group_windows;
pub mod local_time_zone;
pub mod match_recognize;
pub mod over_functions;
pub mod parser;
pub mod plan;
pub mod planner;
mod select_names;
pub mod source_scan;
pub mod spill_dir;
pub mod temporal_join;
pub mod types;
pub mod unnest;
mod window_forms;
pub mod window_lists;

pub use catalog::{CatalogManager, ObjectPath, TableDef, ViewDef};
pub use parser::{Located, WeirStatement, parse_script};
pub use plan::{
    AggregateSpec, CalcStep, ExpandStep, JoinKind, OverFrame, PlanNode, StreamPlan, UnnestStep,
};
pub use planner::{BatchScan, Planner, SessionUpgrade, computed_physical};
