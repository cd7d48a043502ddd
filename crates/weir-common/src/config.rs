//! Job configuration: the keys a user may `SET`, named as in Flink.
//!
//! [`Config`] keeps the raw strings the user set (so `SET;` can show them) and parses on
//! read through typed getters. Unknown keys are rejected with the list of known ones.

use crate::{Error, Result};
use std::collections::BTreeMap;
use std::time::Duration;

/// Streaming (incremental operators, checkpoints) or batch (bounded input only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeMode {
    Streaming,
    Batch,
}

/// Describes one configuration key.
pub struct KeyInfo {
    pub key: &'static str,
    /// Older Flink names accepted for the same setting.
    pub aliases: &'static [&'static str],
    pub default: &'static str,
    pub doc: &'static str,
    kind: Kind,
}

#[derive(Clone, Copy)]
enum Kind {
    Duration,
    OptDuration,
    Int,
    /// A count that may be zero.
    Count,
    /// A decimal number, at least `min`.
    Float {
        min: f64,
    },
    Bool,
    Text,
    /// A memory size (`512 mb`, `2 gb`).
    MemorySize,
    Mode,
    Restart,
    /// One of a fixed set of words.
    Choice(&'static [&'static str]),
}

macro_rules! key {
    ($k:expr, [$($a:expr),*], $d:expr, Choice($choices:expr), $doc:expr) => {
        KeyInfo { key: $k, aliases: &[$($a),*], default: $d, kind: Kind::Choice($choices), doc: $doc }
    };
    ($k:expr, [$($a:expr),*], $d:expr, Float($min:expr), $doc:expr) => {
        KeyInfo { key: $k, aliases: &[$($a),*], default: $d, kind: Kind::Float { min: $min }, doc: $doc }
    };
    ($k:expr, [$($a:expr),*], $d:expr, $kind:ident, $doc:expr) => {
        KeyInfo { key: $k, aliases: &[$($a),*], default: $d, kind: Kind::$kind, doc: $doc }
    };
}

/// Every key Weir understands.
pub static KEYS: &[KeyInfo] = &[
    key!(
        "parallelism.default",
        [],
        "",
        Int,
        "Default parallelism of every operator (default: number of CPU cores)."
    ),
    key!(
        "execution.runtime-mode",
        [],
        "streaming",
        Mode,
        "streaming or batch."
    ),
    key!(
        "execution.checkpointing.interval",
        [],
        "",
        OptDuration,
        "Interval of periodic checkpoints; unset disables them (the final checkpoint of a bounded job is still taken)."
    ),
    key!(
        "execution.checkpointing.timeout",
        [],
        "10 min",
        Duration,
        "A checkpoint not complete after this long is aborted."
    ),
    key!(
        "execution.checkpointing.min-pause",
        [],
        "0 ms",
        Duration,
        "Minimum pause between the end of one checkpoint and the start of the next."
    ),
    key!(
        "execution.checkpointing.max-concurrent-checkpoints",
        [],
        "1",
        Int,
        "Checkpoints in flight at once (Weir supports 1)."
    ),
    key!(
        "execution.checkpointing.checkpoints-after-tasks-finish",
        [],
        "true",
        Bool,
        "FLIP-147: keep checkpointing after some tasks finish and wait for a final checkpoint before ending."
    ),
    key!(
        "execution.checkpointing.incremental",
        [],
        "true",
        Bool,
        "Incremental checkpoints: a checkpoint writes only the keyed state that changed since the task's previous one (state of each key group is kept once in the job's shared folder and referenced by later checkpoints). Savepoints are always full."
    ),
    key!(
        "execution.checkpointing.dir",
        ["state.checkpoints.dir"],
        "",
        Text,
        "Where checkpoints are stored: a local path or an object-store URL (file://, s3://). Unset: in memory."
    ),
    key!(
        "execution.checkpointing.num-retained",
        ["state.checkpoints.num-retained"],
        "1",
        Int,
        "Number of completed checkpoints kept."
    ),
    key!(
        "execution.checkpointing.lease-timeout",
        [],
        "30 s",
        Duration,
        "Weir: a run claims its checkpoint folder with a lease; on an object store a lease not renewed for this long may be taken over by another run (a local folder is locked by the operating system instead)."
    ),
    key!(
        "execution.checkpointing.savepoint-dir",
        ["state.savepoints.dir"],
        "",
        Text,
        "Default folder of savepoints."
    ),
    key!(
        "execution.savepoint.path",
        ["execution.savepoint-path"],
        "",
        Text,
        "The savepoint (or checkpoint) the next job started starts from, as `weir run --restore PATH` does."
    ),
    key!(
        "restart-strategy.type",
        ["restart-strategy"],
        "",
        Restart,
        "What a failed job does: 'none', 'fixed-delay', 'exponential-delay' or 'failure-rate' (it restarts in the same process from its latest completed checkpoint). Unset: 'exponential-delay' when checkpointing is on, else 'none'."
    ),
    key!(
        "restart-strategy.fixed-delay.attempts",
        [],
        "1",
        Count,
        "fixed-delay: restarts before the job ends with its failure."
    ),
    key!(
        "restart-strategy.fixed-delay.delay",
        [],
        "1 s",
        Duration,
        "fixed-delay: wait before each restart."
    ),
    key!(
        "restart-strategy.exponential-delay.initial-backoff",
        [],
        "1 s",
        Duration,
        "exponential-delay: wait before the first restart."
    ),
    key!(
        "restart-strategy.exponential-delay.max-backoff",
        [],
        "1 min",
        Duration,
        "exponential-delay: the longest wait."
    ),
    key!(
        "restart-strategy.exponential-delay.backoff-multiplier",
        [],
        "1.5",
        Float(1.0),
        "exponential-delay: each wait is the previous one times this."
    ),
    key!(
        "restart-strategy.exponential-delay.reset-backoff-threshold",
        [],
        "1 h",
        Duration,
        "exponential-delay: a job that ran this long since its last restart starts over from the initial back-off (and attempt count)."
    ),
    key!(
        "restart-strategy.exponential-delay.jitter-factor",
        [],
        "0.1",
        Float(0.0),
        "exponential-delay: each wait moves randomly by up to this fraction of itself."
    ),
    key!(
        "restart-strategy.exponential-delay.attempts-before-reset-backoff",
        [],
        "",
        Count,
        "exponential-delay: restarts before the job ends with its failure, counted since the last reset (unset: no limit)."
    ),
    key!(
        "restart-strategy.failure-rate.max-failures-per-interval",
        [],
        "1",
        Int,
        "failure-rate: failures within the interval after which the job ends."
    ),
    key!(
        "restart-strategy.failure-rate.failure-rate-interval",
        [],
        "1 min",
        Duration,
        "failure-rate: the interval over which failures are counted."
    ),
    key!(
        "restart-strategy.failure-rate.delay",
        [],
        "1 s",
        Duration,
        "failure-rate: wait before each restart."
    ),
    key!(
        "rest.port",
        [],
        "",
        Count,
        "Port of the REST API and web dashboard (unset: no server; 0: any free port, printed at start)."
    ),
    key!(
        "rest.bind-address",
        [],
        "127.0.0.1",
        Text,
        "Address the REST API, dashboard and Prometheus endpoint listen on (loopback by default)."
    ),
    key!(
        "metrics.reporter.prom.port",
        [],
        "",
        Count,
        "Port of a Prometheus text endpoint (/metrics) with the job, vertex and subtask metrics (unset: off; 0: any free port)."
    ),
    key!("pipeline.name", [], "", Text, "Name of the job."),
    key!(
        "metrics.task.detailed",
        [],
        "true",
        Bool,
        "Weir: measure each subtask's bytes in/out and busy, idle and back-pressured time (shown by the REST API, dashboard and Prometheus endpoint). Off: those read 0; records, watermarks, state and checkpoint figures are kept."
    ),
    key!(
        "pipeline.max-parallelism",
        [],
        "128",
        Int,
        "Number of key groups; fixed for the life of a job's state."
    ),
    key!(
        "taskmanager.memory.managed.size",
        [],
        "",
        MemorySize,
        "The memory budget of a job's state (default: taskmanager.memory.managed.fraction of taskmanager.memory.flink.size). Batch mode: what DataFusion's sorts, joins and aggregates may hold together; past it they spill to disk, and one that cannot spill fails with an error naming this key. Streaming: what a join's stored rows and their index may hold; past it the oldest rows move to local disk under io.tmp.dirs."
    ),
    key!(
        "taskmanager.memory.managed.fraction",
        [],
        "0.4",
        Float(0.0),
        "The state memory budget as a fraction of taskmanager.memory.flink.size, when taskmanager.memory.managed.size is not set."
    ),
    key!(
        "taskmanager.memory.flink.size",
        [],
        "",
        MemorySize,
        "The memory the task manager plans to use in all, of which taskmanager.memory.managed.fraction is batch mode's budget (default: the machine's memory, at most 8 gb; a larger budget mostly adds page faults: sorts that spill early run as fast)."
    ),
    key!(
        "io.tmp.dirs",
        [],
        "",
        Text,
        "The directory spill files go to, in batch mode and for streaming state past its memory budget (default: the system's temporary directory). Streaming state files are unlinked when created: nothing is left behind, however the process ends."
    ),
    key!(
        "table.exec.state.ttl",
        [],
        "0 ms",
        Duration,
        "State of updating aggregates, Top-N and regular joins untouched for this long (processing time) is dropped (0: kept forever)."
    ),
    key!(
        "slot.request.timeout",
        [],
        "5 min",
        Duration,
        "A batch job on a Ballista cluster fails once the cluster has had no executor for this long (a job on a Weir coordinator waits this long for enough task slots: its --slot-timeout)."
    ),
    key!(
        "table.exec.source.idle-timeout",
        [],
        "0 ms",
        Duration,
        "A source subtask that emitted no rows for this long is marked idle, and its watermark stops holding back downstream watermarks until it emits again (0: never idle)."
    ),
    key!(
        "table.local-time-zone",
        [],
        "default",
        Text,
        "Zone in which TIMESTAMP_LTZ values are read and shown as local date-times (casts, FROM_UNIXTIME, UNIX_TIMESTAMP, DATE_FORMAT, LOCALTIMESTAMP): a zone id such as 'Asia/Shanghai', 'UTC' or 'GMT+08:00'; 'default' is the machine's zone."
    ),
    key!(
        "table.optimizer.reuse-source-enabled",
        [],
        "true",
        Bool,
        "Scans of the same table in one job (a self-join, several INSERTs, views over one table) share one source: it is read once and every reader sees the same rows."
    ),
    key!(
        "sql-client.execution.result-mode",
        [],
        "table",
        Choice(&["table", "changelog", "tableau"]),
        "How the shell shows a streaming SELECT: 'table' keeps the result up to date and shows it (redrawn each second on a terminal, and when the query ends), 'changelog' lists every change with its kind, 'tableau' lists them as the rows of one table."
    ),
    key!(
        "sql-client.execution.max-table-result.rows",
        [],
        "1000000",
        Int,
        "The most rows the shell's 'table' result mode keeps; beyond it the oldest rows are dropped."
    ),
];

/// A set of configuration values.
#[derive(Debug, Clone, Default)]
pub struct Config {
    values: BTreeMap<String, String>,
}

/// `taskmanager.memory.flink.size` when it is not set (and the machine has more).
const DEFAULT_FLINK_MEMORY: u64 = 8 << 30;

impl Config {
    pub fn new() -> Self {
        Self::default()
    }

    fn info(key: &str) -> Result<&'static KeyInfo> {
        KEYS.iter()
            .find(|k| k.key == key || k.aliases.contains(&key))
            .ok_or_else(|| {
                let known: Vec<_> = KEYS.iter().map(|k| k.key).collect();
                Error::config(format!(
                    "unknown configuration key '{key}'; known keys: {}",
                    known.join(", ")
                ))
            })
    }

    /// Sets `key` after checking that it is known and that `value` parses.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let info = Self::info(key)?;
        let bad = |what: &str| {
            Error::config(format!(
                "invalid value '{value}' for '{}': expected {what}",
                info.key
            ))
        };
        match info.kind {
            Kind::Duration | Kind::OptDuration => {
                parse_duration(value).map_err(|_| bad("a duration such as '10 s' or '500 ms'"))?;
            }
            Kind::Int => {
                let n: usize = value
                    .trim()
                    .parse()
                    .map_err(|_| bad("a positive integer"))?;
                if n == 0 {
                    return Err(bad("a positive integer"));
                }
                if info.key == "execution.checkpointing.max-concurrent-checkpoints" && n != 1 {
                    return Err(Error::config(
                        "execution.checkpointing.max-concurrent-checkpoints: Weir runs at most one checkpoint at a time; only 1 is supported",
                    ));
                }
            }
            Kind::Count => {
                value
                    .trim()
                    .parse::<u32>()
                    .map_err(|_| bad("a whole number"))?;
            }
            Kind::Float { min } => {
                let x: f64 = value.trim().parse().map_err(|_| bad("a number"))?;
                if !(x >= min && x.is_finite()) {
                    return Err(bad(&format!("a number of at least {min}")));
                }
            }
            Kind::Restart => {
                parse_restart_type(value).ok_or_else(|| {
                    bad("'none', 'fixed-delay', 'exponential-delay' or 'failure-rate'")
                })?;
            }
            Kind::Bool => {
                parse_bool(value).ok_or_else(|| bad("true or false"))?;
            }
            Kind::Mode => {
                parse_mode(value).ok_or_else(|| bad("'streaming' or 'batch'"))?;
            }
            Kind::Choice(choices) => {
                if !choices.contains(&value.trim().to_lowercase().as_str()) {
                    return Err(bad(&format!("one of '{}'", choices.join("', '"))));
                }
            }
            Kind::Text => {}
            Kind::MemorySize => {
                parse_memory_size(value).map_err(|_| bad("a memory size such as '512 mb'"))?;
            }
        }
        self.values
            .insert(info.key.to_string(), value.trim().to_string());
        Ok(())
    }

    /// Removes a value set before (`RESET 'key'`).
    pub fn reset(&mut self, key: &str) -> Result<()> {
        let info = Self::info(key)?;
        self.values.remove(info.key);
        Ok(())
    }

    fn raw(&self, key: &str) -> Option<&str> {
        self.values
            .get(key)
            .map(|s| s.as_str())
            .filter(|s| !s.is_empty())
    }

    fn raw_or_default(&self, key: &str) -> &str {
        self.raw(key)
            .unwrap_or_else(|| Self::info(key).map(|i| i.default).unwrap_or(""))
    }

    /// `table.local-time-zone` as set (`default`: the machine's zone).
    pub fn local_time_zone(&self) -> &str {
        self.raw_or_default("table.local-time-zone")
    }

    pub fn parallelism(&self) -> usize {
        self.raw("parallelism.default")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1)
            })
    }

    pub fn max_parallelism(&self) -> usize {
        self.raw_or_default("pipeline.max-parallelism")
            .parse()
            .unwrap_or(128)
    }

    pub fn runtime_mode(&self) -> RuntimeMode {
        parse_mode(self.raw_or_default("execution.runtime-mode")).unwrap_or(RuntimeMode::Streaming)
    }

    pub fn checkpoint_interval(&self) -> Option<Duration> {
        self.raw("execution.checkpointing.interval")
            .and_then(|v| parse_duration(v).ok())
    }

    pub fn lease_timeout(&self) -> Duration {
        parse_duration(self.raw_or_default("execution.checkpointing.lease-timeout"))
            .unwrap_or(Duration::from_secs(30))
    }

    pub fn checkpoint_timeout(&self) -> Duration {
        parse_duration(self.raw_or_default("execution.checkpointing.timeout"))
            .unwrap_or(Duration::from_secs(600))
    }

    pub fn checkpoint_min_pause(&self) -> Duration {
        parse_duration(self.raw_or_default("execution.checkpointing.min-pause")).unwrap_or_default()
    }

    pub fn checkpoints_after_tasks_finish(&self) -> bool {
        parse_bool(self.raw_or_default("execution.checkpointing.checkpoints-after-tasks-finish"))
            .unwrap_or(true)
    }

    pub fn incremental_checkpoints(&self) -> bool {
        parse_bool(self.raw_or_default("execution.checkpointing.incremental")).unwrap_or(true)
    }

    pub fn checkpoint_dir(&self) -> Option<String> {
        self.raw("execution.checkpointing.dir").map(str::to_string)
    }

    /// `execution.savepoint.path`: where the next job starts from.
    pub fn savepoint_path(&self) -> Option<String> {
        self.raw("execution.savepoint.path").map(str::to_string)
    }

    /// `sql-client.execution.result-mode`, lower-case.
    pub fn result_mode(&self) -> String {
        self.raw_or_default("sql-client.execution.result-mode")
            .to_lowercase()
    }

    /// `metrics.task.detailed`.
    pub fn detailed_task_metrics(&self) -> bool {
        parse_bool(self.raw_or_default("metrics.task.detailed")).unwrap_or(true)
    }

    /// `sql-client.execution.max-table-result.rows`.
    pub fn max_table_result_rows(&self) -> usize {
        self.raw_or_default("sql-client.execution.max-table-result.rows")
            .parse()
            .unwrap_or(1_000_000)
    }

    /// Every known key with its value: the one set, else the default (`None` when a key
    /// has no fixed default, e.g. the parallelism, which follows the machine).
    pub fn effective_entries(&self) -> impl Iterator<Item = (&'static str, Option<&str>, bool)> {
        KEYS.iter().map(|info| match self.raw(info.key) {
            Some(v) => (info.key, Some(v), true),
            None => (
                info.key,
                Some(info.default).filter(|d| !d.is_empty()),
                false,
            ),
        })
    }

    pub fn savepoint_dir(&self) -> Option<String> {
        self.raw("execution.checkpointing.savepoint-dir")
            .map(str::to_string)
    }

    pub fn num_retained_checkpoints(&self) -> usize {
        self.raw_or_default("execution.checkpointing.num-retained")
            .parse()
            .unwrap_or(1)
    }

    pub fn pipeline_name(&self) -> Option<String> {
        self.raw("pipeline.name").map(str::to_string)
    }

    /// `taskmanager.memory.managed.size` in bytes; when not set,
    /// `taskmanager.memory.managed.fraction` of `taskmanager.memory.flink.size` (as Flink
    /// sizes managed memory), which defaults to the machine's memory, at most 8 GiB.
    pub fn managed_memory(&self) -> u64 {
        if let Ok(size) = parse_memory_size(self.raw_or_default("taskmanager.memory.managed.size"))
        {
            return size;
        }
        let fraction: f64 = self
            .raw_or_default("taskmanager.memory.managed.fraction")
            .trim()
            .parse()
            .unwrap_or(0.4);
        let total = parse_memory_size(self.raw_or_default("taskmanager.memory.flink.size"))
            .unwrap_or_else(|_| machine_memory().min(DEFAULT_FLINK_MEMORY));
        (total as f64 * fraction.min(1.0)) as u64
    }

    /// `io.tmp.dirs`, when set.
    pub fn tmp_dir(&self) -> Option<String> {
        Some(self.raw_or_default("io.tmp.dirs").trim().to_string()).filter(|d| !d.is_empty())
    }

    /// `table.exec.state.ttl`, when set.
    pub fn state_ttl(&self) -> Option<Duration> {
        parse_duration(self.raw_or_default("table.exec.state.ttl"))
            .ok()
            .filter(|d| !d.is_zero())
    }

    /// `table.optimizer.reuse-source-enabled`.
    pub fn reuse_sources(&self) -> bool {
        parse_bool(self.raw_or_default("table.optimizer.reuse-source-enabled")).unwrap_or(true)
    }

    /// The restart strategy (`restart-strategy.*`); unset, `exponential-delay` with
    /// periodic checkpoints and `none` without, as in Flink.
    pub fn restart_strategy(&self) -> crate::RestartStrategy {
        use crate::RestartStrategy as S;
        let duration = |key: &str| parse_duration(self.raw_or_default(key)).unwrap_or_default();
        let number = |key: &str| {
            self.raw_or_default(key)
                .trim()
                .parse::<f64>()
                .unwrap_or(1.0)
        };
        let count = |key: &str| {
            self.raw_or_default(key)
                .trim()
                .parse::<u32>()
                .unwrap_or(u32::MAX)
        };
        let kind = match self
            .raw("restart-strategy.type")
            .and_then(parse_restart_type)
        {
            Some(kind) => kind,
            None if self.checkpoint_interval().is_some() => RestartType::ExponentialDelay,
            None => RestartType::None,
        };
        match kind {
            RestartType::None => S::None,
            RestartType::FixedDelay => S::FixedDelay {
                attempts: count("restart-strategy.fixed-delay.attempts"),
                delay: duration("restart-strategy.fixed-delay.delay"),
            },
            RestartType::ExponentialDelay => S::ExponentialDelay {
                initial_backoff: duration("restart-strategy.exponential-delay.initial-backoff"),
                max_backoff: duration("restart-strategy.exponential-delay.max-backoff"),
                multiplier: number("restart-strategy.exponential-delay.backoff-multiplier"),
                reset_threshold: duration(
                    "restart-strategy.exponential-delay.reset-backoff-threshold",
                ),
                jitter: number("restart-strategy.exponential-delay.jitter-factor"),
                attempts_before_reset: count(
                    "restart-strategy.exponential-delay.attempts-before-reset-backoff",
                ),
            },
            RestartType::FailureRate => S::FailureRate {
                max_failures: count("restart-strategy.failure-rate.max-failures-per-interval"),
                interval: duration("restart-strategy.failure-rate.failure-rate-interval"),
                delay: duration("restart-strategy.failure-rate.delay"),
            },
        }
    }

    /// `rest.port`, when set.
    pub fn rest_port(&self) -> Option<u16> {
        self.raw("rest.port").and_then(|p| p.trim().parse().ok())
    }

    /// `metrics.reporter.prom.port`, when set.
    pub fn prometheus_port(&self) -> Option<u16> {
        self.raw("metrics.reporter.prom.port")
            .and_then(|p| p.trim().parse().ok())
    }

    /// `rest.bind-address`.
    pub fn rest_bind_address(&self) -> String {
        self.raw_or_default("rest.bind-address").to_string()
    }

    /// `slot.request.timeout`.
    pub fn slot_request_timeout(&self) -> Duration {
        parse_duration(self.raw_or_default("slot.request.timeout"))
            .unwrap_or(Duration::from_secs(300))
    }

    /// `table.exec.source.idle-timeout`, when set.
    pub fn source_idle_timeout(&self) -> Option<Duration> {
        parse_duration(self.raw_or_default("table.exec.source.idle-timeout"))
            .ok()
            .filter(|d| !d.is_zero())
    }
}

/// The restart strategy's type, by Flink's names (and their older spellings).
#[derive(Clone, Copy, PartialEq, Eq)]
enum RestartType {
    None,
    FixedDelay,
    ExponentialDelay,
    FailureRate,
}

fn parse_restart_type(v: &str) -> Option<RestartType> {
    match v.trim().to_ascii_lowercase().as_str() {
        "none" | "off" | "disable" => Some(RestartType::None),
        "fixed-delay" | "fixeddelay" => Some(RestartType::FixedDelay),
        "exponential-delay" | "exponentialdelay" => Some(RestartType::ExponentialDelay),
        "failure-rate" | "failurerate" => Some(RestartType::FailureRate),
        _ => None,
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

fn parse_mode(v: &str) -> Option<RuntimeMode> {
    match v.trim().to_ascii_lowercase().as_str() {
        "streaming" => Some(RuntimeMode::Streaming),
        "batch" => Some(RuntimeMode::Batch),
        _ => None,
    }
}

/// Parses a Flink-style duration: `10 s`, `500ms`, `1 min`, `2h`, `1 d`; a bare number is
/// milliseconds.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| Error::config(format!("invalid duration '{text}'")))?;
    let ms = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => n,
        "s" | "sec" | "secs" | "second" | "seconds" => n * 1000,
        "min" | "m" | "minute" | "minutes" => n * 60_000,
        "h" | "hour" | "hours" => n * 3_600_000,
        "d" | "day" | "days" => n * 86_400_000,
        _ => return Err(Error::config(format!("invalid duration unit in '{text}'"))),
    };
    Ok(Duration::from_millis(ms))
}

/// The machine's memory in bytes (`MemTotal` of `/proc/meminfo`; 4 GiB where there is
/// none).
pub fn machine_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb * 1024)
        })
        .unwrap_or(4 << 30)
}

/// Parses a memory size: `128mb`, `1 gb`, `4096` (bytes), `64 kb`.
pub fn parse_memory_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| Error::config(format!("invalid memory size '{text}'")))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" | "bytes" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => {
            return Err(Error::config(format!(
                "invalid memory size unit in '{text}'"
            )));
        }
    };
    Ok(n * mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10 s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1 min").unwrap(), Duration::from_secs(60));
        assert!(parse_duration("ten").is_err());
    }

    #[test]
    fn unknown_key_lists_known_ones() {
        let err = Config::new()
            .set("execution.checkpoint.interval", "1 s")
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("unknown configuration key 'execution.checkpoint.interval'"));
        assert!(text.contains("execution.checkpointing.interval"));
    }

    #[test]
    fn restart_strategy_defaults_follow_checkpointing() {
        let mut c = Config::new();
        assert_eq!(c.restart_strategy(), crate::RestartStrategy::None);
        c.set("execution.checkpointing.interval", "1 s").unwrap();
        assert!(matches!(
            c.restart_strategy(),
            crate::RestartStrategy::ExponentialDelay {
                attempts_before_reset: u32::MAX,
                ..
            }
        ));
        c.set("restart-strategy", "fixeddelay").unwrap();
        c.set("restart-strategy.fixed-delay.attempts", "3").unwrap();
        c.set("restart-strategy.fixed-delay.delay", "10 ms")
            .unwrap();
        assert_eq!(
            c.restart_strategy(),
            crate::RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_millis(10)
            }
        );
        assert!(c.set("restart-strategy.type", "sometimes").is_err());
        assert!(
            c.set(
                "restart-strategy.exponential-delay.backoff-multiplier",
                "0.5"
            )
            .is_err()
        );
        c.set("restart-strategy.fixed-delay.attempts", "0").unwrap();
    }

    #[test]
    fn batch_budget_is_the_managed_fraction_of_the_flink_memory() {
        let mut c = Config::new();
        let default_total = machine_memory().min(8 << 30);
        assert_eq!(c.managed_memory(), (default_total as f64 * 0.4) as u64);
        c.set("taskmanager.memory.flink.size", "1 gb").unwrap();
        assert_eq!(c.managed_memory(), ((1u64 << 30) as f64 * 0.4) as u64);
        c.set("taskmanager.memory.managed.fraction", "0.5").unwrap();
        assert_eq!(c.managed_memory(), 1 << 29);
        c.set("taskmanager.memory.managed.size", "64 mb").unwrap();
        assert_eq!(c.managed_memory(), 64 << 20);
    }

    #[test]
    fn aliases_map_to_canonical_keys() {
        let mut c = Config::new();
        c.set("state.checkpoints.dir", "/tmp/x").unwrap();
        assert_eq!(c.checkpoint_dir().as_deref(), Some("/tmp/x"));
        assert!(c.set("parallelism.default", "0").is_err());
    }
}
