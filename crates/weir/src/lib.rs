#![warn(missing_docs)]
//! Weir: a SQL stream processor with exactly-once output, as a library.
//!
//! ```no_run
//! # async fn demo() -> weir::Result<()> {
//! let mut engine = weir::Engine::default();
//! let mut plans = Vec::new();
//! for stmt in engine.parse("CREATE TABLE t (x BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '10');
//!                           SELECT x FROM t;")? {
//!     if let weir::Outcome::Job(parts) = engine.execute(&stmt).await? {
//!         plans.extend(parts);
//!     }
//! }
//! let job = engine.start(engine.build_job(&plans).await?, None).await?;
//! job.wait().await?;
//! # Ok(()) }
//! ```
//!
//! This crate only re-exports the layers: [`sql`] (parsing and planning), [`runtime`]
//! (operators, jobs, checkpoints), [`connectors`] (sources, sinks, the two-phase-commit
//! framework) and [`engine`], and the versions of [`arrow`] and [`datafusion`] Weir is
//! built with (to write functions for [`Engine::register_udf`]).
//!
//! Jobs go to a cluster too: [`cluster::client::submit`] runs a script's job on a Weir
//! coordinator (as `weir run --cluster host:port` does), and
//! `engine.set_batch_cluster(weir::ballista::client_session("df://host:port", timeout)?)`
//! runs an engine's batch queries on a Ballista cluster (as `weir run --mode batch
//! --cluster df://host:port` does), failing a query once the cluster has had no executor
//! for `timeout` (`engine.config().slot_request_timeout()`).

pub use arrow;
pub use datafusion;
/// Batch queries on an Apache DataFusion Ballista cluster.
pub use weir_ballista as ballista;
/// Jobs on a Weir coordinator and its workers.
pub use weir_cluster as cluster;
pub use weir_common as common;
pub use weir_common::{Config, Error, Result};
pub use weir_connectors as connectors;
pub use weir_engine as engine;
pub use weir_engine::{Engine, Outcome};
pub use weir_runtime as runtime;
pub use weir_runtime::{JobHandle, JobOutcome, RestoreFrom};
pub use weir_sql as sql;
