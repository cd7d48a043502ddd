//! Batch mode on an [Apache DataFusion Ballista](https://datafusion.apache.org/ballista/)
//! cluster (`weir run --mode batch --cluster df://host:port`).
//!
//! Ballista distributes DataFusion plans: its scheduler cuts a physical plan into stages
//! at its exchanges, and its executors run the stages' tasks and serve their shuffle
//! output to each other over Arrow Flight. Weir's part:
//!
//! - **Codecs** ([`codec`]): Weir's tables travel as their DDL (the scheduler plans them
//!   again, the executors open their connectors), Weir's scans as DDL, restrictions and
//!   projection, and Weir's functions by name.
//! - **Processes** ([`process`]): `weir ballista-scheduler` and `weir ballista-executor`
//!   are Ballista's own scheduler and executor with Weir's codecs, functions and
//!   connectors built in (a stock Ballista executor cannot read a Weir table).
//! - **Scans** ([`task_scan`]): each task of a stage reads the partitions of a Weir scan
//!   that Ballista gave it, and no other.
//! - **Client** ([`client_session`]): the `weir` process that runs the script plans
//!   the query as in one process and hands the plan to the scheduler. The rows come back
//!   to it and go into the table's two-phase-commit sink, committed once at the end, as
//!   batch mode commits in one process: a failed or killed job commits nothing.

pub mod codec;
pub mod process;
pub mod task_scan;
mod watch;

use ballista_core::extension::{SessionConfigExt, SessionStateExt};
use datafusion::execution::session_state::SessionStateBuilder;
use std::sync::Arc;
use weir_common::{Error, Result};

/// Makes function `udf` known to the Ballista scheduler and executor this process runs
/// ([`process::run_scheduler`], [`process::run_executor`]). Functions a program registers
/// with `Engine::register_udf` are Rust code, which cannot travel to a stock `weir
/// ballista-*` process: a program that calls them on a cluster runs its scheduler and
/// executors from its own binary, with the same functions registered here first (as a
/// Flink job's functions travel in its jar).
pub fn register_udf(udf: datafusion::logical_expr::ScalarUDF) {
    codec::register(udf);
}

/// How a Ballista cluster's address starts (`df://host:port`), as Ballista's own client
/// writes it.
pub const SCHEME: &str = "df://";

/// Ballista's default scheduler port.
pub const DEFAULT_PORT: u16 = 50050;

/// Whether `address` names a Ballista cluster rather than a Weir coordinator.
pub fn is_ballista(address: &str) -> bool {
    address.starts_with(SCHEME)
}

/// `host:port` of `df://host[:port]`.
pub fn scheduler_address(address: &str) -> Result<(String, u16)> {
    let rest = address.strip_prefix(SCHEME).unwrap_or(address);
    let rest = rest.trim_end_matches('/');
    let (host, port) = match rest.rsplit_once(':') {
        Some((host, port)) => (
            host,
            port.parse::<u16>().map_err(|_| {
                Error::config(format!(
                    "'{address}': the port of a Ballista scheduler must be a number"
                ))
            })?,
        ),
        None => (rest, DEFAULT_PORT),
    };
    if host.is_empty() {
        return Err(Error::config(format!(
            "'{address}' names no host (expected {SCHEME}host:port)"
        )));
    }
    Ok((host.to_string(), port))
}

/// What makes a planner's session run its batch queries on the Ballista scheduler at
/// `address` (`df://host:port`): Ballista's query planner with Weir's codec, over the
/// planner's own configuration, catalog and functions. A query fails once the cluster
/// has had no executor for `slot_timeout` (`slot.request.timeout`, Flink's 5 min).
pub fn client_session(
    address: &str,
    slot_timeout: std::time::Duration,
) -> Result<weir_sql::SessionUpgrade> {
    let (host, port) = scheduler_address(address)?;
    let url = format!("http://{host}:{port}");
    let probe = watch::Probe {
        scheduler: format!("{host}:{port}"),
        timeout: slot_timeout,
    };
    Ok(Arc::new(move |state| {
        let mut config = state.config().clone();
        // Ballista's scheduler selects a join's sides again when it resolves a stage's
        // inputs, after DataFusion has built the join's dynamic filter, which DataFusion
        // 55 refuses ("Cannot swap HashJoinExec inputs after dynamic filters have been
        // constructed"); the job then never ends (Nexmark q5 and q7). Jobs on a cluster
        // go without dynamic filters (the switch for joins alone is overridden by this
        // one's default where the scheduler applies the client's settings).
        config
            .options_mut()
            .optimizer
            .enable_dynamic_filter_pushdown = false;
        let config = config
            .with_ballista_logical_extension_codec(Arc::new(codec::WeirLogicalCodec::default()))
            .with_ballista_physical_extension_codec(Arc::new(codec::WeirPhysicalCodec::default()))
            .with_ballista_job_name("weir batch job")
            // Ballista 55's adaptive planner (on by default) is not used: with it, a
            // UNION ALL's inputs were read more than once (5,700 rows counted from
            // 1,500 + 1,200; `tests/ballista.rs` runs such a query), and since the scans
            // are cut per task (`task_scan`), executors reject its tasks ("task could
            // not be prepared").
            .with_ballista_adaptive_query_planner(false);
        let state = SessionStateBuilder::new_from_existing(state)
            .with_config(config)
            .build();
        let state = state
            .upgrade_for_ballista(url.clone())
            .map_err(Error::DataFusion)?;
        let planner = watch::WatchedPlanner {
            inner: state.query_planner().clone(),
            probe: probe.clone(),
        };
        Ok(SessionStateBuilder::new_from_existing(state)
            .with_query_planner(Arc::new(planner))
            .build())
    }))
}

/// Checks that a Ballista scheduler answers at `address`, so that a wrong address is
/// named before any query is planned (Ballista's client would only fail at the first
/// query, with a transport error).
pub async fn check_scheduler(address: &str) -> Result<()> {
    let (host, port) = scheduler_address(address)?;
    let connect = tokio::net::TcpStream::connect((host.as_str(), port));
    match tokio::time::timeout(std::time::Duration::from_secs(10), connect).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Error::config(format!(
            "no Ballista scheduler answers at {address}: {e} (start one with \
             `weir ballista-scheduler --listen {host}:{port}`)"
        ))),
        Err(_) => Err(Error::config(format!(
            "no Ballista scheduler answers at {address} within 10 s"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_read_as_ballista_writes_them() {
        assert!(is_ballista("df://localhost:50050"));
        assert!(!is_ballista("localhost:6123"));
        assert_eq!(
            scheduler_address("df://127.0.0.1:7000").unwrap(),
            ("127.0.0.1".into(), 7000)
        );
        assert_eq!(
            scheduler_address("df://scheduler/").unwrap(),
            ("scheduler".into(), DEFAULT_PORT)
        );
        assert!(scheduler_address("df://:7000").is_err());
        assert!(scheduler_address("df://host:http").is_err());
    }
}
