//! `weir ballista-scheduler` and `weir ballista-executor`: Ballista's scheduler and
//! executor processes, with Weir's codecs, functions and connectors built in.

use crate::codec::{WeirLogicalCodec, WeirPhysicalCodec};
use ballista_core::extension::SessionConfigExt;
use std::net::SocketAddr;
use std::sync::Arc;
use weir_common::{Error, Result};

fn ballista(e: ballista_core::error::BallistaError) -> Error {
    Error::External(format!("Ballista: {e}"))
}

/// How a Weir-built Ballista scheduler runs.
#[derive(Debug, Clone)]
pub struct SchedulerOptions {
    /// Where it listens for clients and executors.
    pub listen: SocketAddr,
    /// The host executors and clients reach it at (its own address by default).
    pub external_host: Option<String>,
    /// An executor that has not sent a heartbeat for this long is lost; its tasks run
    /// again elsewhere.
    pub executor_timeout_secs: u64,
    /// How often lost executors are looked for.
    pub expire_interval_secs: u64,
}

/// Runs a Ballista scheduler until the process ends.
pub async fn run_scheduler(options: SchedulerOptions) -> Result<()> {
    use ballista_scheduler::cluster::BallistaCluster;
    use ballista_scheduler::config::SchedulerConfig;
    let config = SchedulerConfig {
        bind_host: options.listen.ip().to_string(),
        bind_port: options.listen.port(),
        external_host: options
            .external_host
            .unwrap_or_else(|| options.listen.ip().to_string()),
        executor_timeout_seconds: options.executor_timeout_secs,
        expire_dead_executor_interval_seconds: options.expire_interval_secs,
        no_executors_grace_period_seconds: options.executor_timeout_secs,
        // Spread a stage's tasks over the executors (Flink spreads slots too), instead
        // of filling the first executor's slots.
        task_distribution: ballista_scheduler::config::TaskDistributionPolicy::RoundRobin,
        ..Default::default()
    }
    .with_override_config_producer(Arc::new(config_producer))
    .with_override_session_builder(Arc::new(crate::codec::session_state));
    let config = SchedulerConfig {
        override_logical_codec: Some(Arc::new(WeirLogicalCodec::default())),
        override_physical_codec: Some(Arc::new(WeirPhysicalCodec::default())),
        ..config
    };
    let cluster = BallistaCluster::new_from_config(&config)
        .await
        .map_err(ballista)?;
    ballista_scheduler::scheduler_process::start_server(cluster, options.listen, Arc::new(config))
        .await
        .map_err(ballista)
}

/// How a Weir-built Ballista executor runs.
#[derive(Debug, Clone)]
pub struct ExecutorOptions {
    /// The scheduler's `host` and `port`.
    pub scheduler: (String, u16),
    /// The host it binds to, and the one others reach it at.
    pub bind_host: String,
    pub external_host: Option<String>,
    /// Its Arrow Flight port (shuffle data and results) and its gRPC port (tasks).
    pub flight_port: u16,
    pub grpc_port: u16,
    /// How many tasks it runs at once (Ballista's vcores; 0: one per core).
    pub slots: usize,
    /// Where shuffle files go (by default `weir-ballista-executor-<task port>` in the
    /// system's temporary folder).
    pub work_dir: Option<String>,
    /// How often it tells the scheduler it is alive.
    pub heartbeat_interval_secs: u64,
}

/// Runs a Ballista executor until the process ends.
pub async fn run_executor(options: ExecutorOptions) -> Result<()> {
    use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
    // Ballista's own default is a temporary folder that it removes at once (its shuffle
    // writers make it again, and nothing removes it at the end).
    let work_dir = match options.work_dir {
        Some(dir) => dir,
        None => {
            let dir =
                std::env::temp_dir().join(format!("weir-ballista-executor-{}", options.grpc_port));
            dir.to_str()
                .ok_or_else(|| {
                    Error::config(format!(
                        "{} is not a UTF-8 path: pass --work-dir",
                        dir.display()
                    ))
                })?
                .to_string()
        }
    };
    std::fs::create_dir_all(&work_dir).map_err(|e| {
        Error::config(format!(
            "cannot create the executor's work folder '{work_dir}': {e}"
        ))
    })?;
    let config = ExecutorProcessConfig {
        bind_host: options.bind_host,
        external_host: options.external_host,
        port: options.flight_port,
        grpc_port: options.grpc_port,
        scheduler_host: options.scheduler.0,
        scheduler_port: options.scheduler.1,
        scheduler_connect_timeout_seconds: 30,
        vcores: options.slots,
        work_dir: Some(work_dir),
        executor_heartbeat_interval_seconds: options.heartbeat_interval_secs,
        print_thread_info: false,
        override_function_registry: Some(Arc::new(crate::codec::function_registry())),
        override_config_producer: Some(Arc::new(config_producer)),
        override_logical_codec: Some(Arc::new(WeirLogicalCodec::default())),
        override_physical_codec: Some(Arc::new(WeirPhysicalCodec::default())),
        ..Default::default()
    };
    start_executor_process(Arc::new(config))
        .await
        .map_err(ballista)
}

/// Ballista's session configuration, with Weir's codecs.
fn config_producer() -> datafusion::prelude::SessionConfig {
    datafusion::prelude::SessionConfig::new_with_ballista()
        .with_ballista_logical_extension_codec(Arc::new(WeirLogicalCodec::default()))
        .with_ballista_physical_extension_codec(Arc::new(WeirPhysicalCodec::default()))
}
