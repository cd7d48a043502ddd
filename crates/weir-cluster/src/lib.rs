//! Weir on several processes: a coordinator (`weir coordinator`) that plans jobs, places
//! their subtasks on workers and runs their checkpoint coordinators, and workers
//! (`weir worker`) that run the subtasks. One process stays the embedded default; a
//! cluster is opt-in (`weir run --cluster URL`).
//!
//! Everything goes over Arrow Flight (gRPC, `arrow-flight` on tonic):
//! * a worker keeps one `DoExchange` stream open to the coordinator: it registers on it,
//!   sends heartbeats and its tasks' checkpoint events, and receives the attempts to run
//!   and the coordinator's messages for their tasks ([`wire::ToWorker`],
//!   [`wire::ToCoordinator`], JSON in `app_metadata`);
//! * a channel between subtasks on two workers is one `DoPut` stream from the sending
//!   worker to the receiving one: Arrow IPC batches, with barriers, watermarks and end of
//!   data inline and in order; HTTP/2 flow control carries back-pressure across;
//! * `weir run --cluster` submits a job with the `submit` action and follows it on the
//!   action's result stream.
//!
//! Workers compile the job themselves from its definition (the script and settings, a
//! [`JobDefinition`]); the coordinator checks they got the same graph (its fingerprint).

pub mod client;
pub mod coordinator;
mod service;
pub mod wire;
pub mod worker;

use serde::{Deserialize, Serialize};
use weir_common::{Error, Result};
use weir_engine::{Engine, Outcome};
use weir_runtime::{JobGraph, JobOptions};

/// A job as submitted: its script and the settings that override the script's `SET`s.
/// Every process that runs a part of the job compiles it from this.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobDefinition {
    /// (name, SQL text) of each file, in order, placeholders filled.
    pub scripts: Vec<(String, String)>,
    /// Configuration keys applied before the script and again after each statement
    /// (`weir run`'s `-D`, `-p`, `--checkpoint-dir` …).
    pub settings: Vec<(String, String)>,
    /// `latest` or a checkpoint/savepoint location.
    pub restore: Option<String>,
}

impl JobDefinition {
    /// Runs the script's statements in a new session and builds its job: the session (its
    /// configuration) and the graph. A script without a streaming job is refused: batch
    /// mode and result tables are not run on a cluster yet.
    pub async fn compile(&self) -> Result<(Engine, JobGraph)> {
        // Planning futures are not `Send`: they run on a thread of their own.
        let job = self.clone();
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || runtime.block_on(job.compile_here()))
            .await
            .map_err(|e| Error::internal(format!("compiling the job failed: {e}")))?
    }

    async fn compile_here(&self) -> Result<(Engine, JobGraph)> {
        let mut engine = Engine::default();
        self.apply_settings(&mut engine)?;
        let mut plans = Vec::new();
        for (name, sql) in &self.scripts {
            let here = |e: Error| Error::Plan(format!("{name}: {e}"));
            for stmt in &engine.parse(sql).map_err(here)? {
                match engine.execute(stmt).await.map_err(here)? {
                    Outcome::Job(parts) => plans.extend(parts),
                    Outcome::Batch(_) => {
                        return Err(Error::config(format!(
                            "{name}: batch mode does not run on a cluster yet; run the script \
                             without --cluster, or in streaming mode"
                        )));
                    }
                    Outcome::JobControl(_) => {
                        return Err(Error::config(format!(
                            "{name}: SHOW JOBS and STOP JOB belong to the shell"
                        )));
                    }
                    Outcome::Done(_) | Outcome::Table { .. } | Outcome::Explain(_) => {}
                }
                self.apply_settings(&mut engine)?;
            }
        }
        if plans.is_empty() {
            return Err(Error::config(
                "the script has no INSERT INTO or SELECT: there is no job to run",
            ));
        }
        let graph = engine.build_job(&plans).await?;
        Ok((engine, graph))
    }

    fn apply_settings(&self, engine: &mut Engine) -> Result<()> {
        for (k, v) in &self.settings {
            engine.config_mut().set(k, v)?;
        }
        Ok(())
    }
}

/// The job options of a compiled job (see [`JobDefinition::compile`]).
pub fn job_options(engine: &Engine) -> JobOptions {
    JobOptions::from_config(engine.config())
}

/// Locks `m`, also after a thread panicked while holding it (the maps it guards stay
/// consistent: every change is one insert or remove).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Turns `host:port` into the `http://host:port` a client connects to.
pub fn endpoint_url(address: &str) -> String {
    if address.contains("://") {
        address.to_string()
    } else {
        format!("http://{address}")
    }
}
