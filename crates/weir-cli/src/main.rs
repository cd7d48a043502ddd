//! The `weir` command: `weir run FILE.sql` runs a SQL script as one job.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use weir::{Engine, Outcome, RestoreFrom};

/// `println!` that does not panic when standard output is closed (e.g. piped into `head`).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod control;
mod remote_jobs;
mod results;
mod shell;

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "SQL stream processing with exactly-once output"
)]
struct Cli {
    /// Without a command, `weir` starts the SQL shell.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Mode {
    Streaming,
    Batch,
}

#[derive(Subcommand)]
enum Command {
    /// Run a SQL script: its DDL and SET statements, then all its INSERT INTO / SELECT
    /// statements together as one job.
    Run {
        /// The script; several files run as one script, in order (e.g. DDL, then a query).
        #[arg(required = true, num_args = 1..)]
        files: Vec<PathBuf>,
        /// streaming (default) or batch.
        #[arg(long, value_enum)]
        mode: Option<Mode>,
        /// Default parallelism of every operator (default: number of cores).
        #[arg(long, short = 'p')]
        parallelism: Option<usize>,
        /// Where checkpoints go: a folder or a URL (file://, s3://).
        #[arg(long)]
        checkpoint_dir: Option<String>,
        /// Interval of periodic checkpoints, e.g. '10 s' or '500ms'.
        #[arg(long)]
        checkpoint_interval: Option<String>,
        /// Restore from 'latest' (the newest checkpoint under --checkpoint-dir) or a
        /// checkpoint folder.
        #[arg(long)]
        restore: Option<String>,
        /// Set a configuration key, e.g. -D execution.checkpointing.num-retained=3.
        #[arg(short = 'D', value_name = "KEY=VALUE")]
        define: Vec<String>,
        /// Fill a `${NAME}` placeholder of the script, e.g. --var EVENTS_NUM=1000000.
        #[arg(long = "var", value_name = "NAME=VALUE")]
        vars: Vec<String>,
        /// No progress line.
        #[arg(long, short = 'q')]
        quiet: bool,
        /// Run on the cluster of the coordinator at this address (`host:port`) instead of
        /// in this process (Flink's --jobmanager). With `--mode batch`, `df://host:port`
        /// runs the queries on the Ballista cluster of that scheduler
        /// (`weir ballista-scheduler`).
        #[arg(long, value_name = "ADDRESS")]
        cluster: Option<String>,
    },
    /// Run an Apache DataFusion Ballista scheduler with Weir's tables and functions built
    /// in: `weir run --mode batch --cluster df://host:port` runs batch jobs on it.
    BallistaScheduler {
        /// Where to listen for clients and executors (`host:port`).
        #[arg(long, default_value = "127.0.0.1:50050")]
        listen: String,
        /// The host executors and clients reach it at (default: the listening host).
        #[arg(long)]
        advertised_host: Option<String>,
        /// An executor silent for this long is lost and its tasks run again elsewhere
        /// (Flink's heartbeat.timeout default).
        #[arg(long, default_value = "50 s")]
        executor_timeout: String,
    },
    /// Run an Apache DataFusion Ballista executor with Weir's connectors built in.
    BallistaExecutor {
        /// The scheduler's address (`host:port`).
        #[arg(long, default_value = "127.0.0.1:50050")]
        scheduler: String,
        /// The host it binds to.
        #[arg(long, default_value = "127.0.0.1")]
        bind_host: String,
        /// The host others reach it at (default: the bound host).
        #[arg(long)]
        advertised_host: Option<String>,
        /// Its Arrow Flight port (shuffle data and results).
        #[arg(long, default_value_t = 50051)]
        flight_port: u16,
        /// Its gRPC port (tasks from the scheduler).
        #[arg(long, default_value_t = 50052)]
        grpc_port: u16,
        /// Tasks it runs at once (default: one per core).
        #[arg(long, default_value_t = 0)]
        slots: usize,
        /// Where its shuffle files go (default: weir-ballista-executor-<grpc port> in the
        /// system's temporary folder).
        #[arg(long)]
        work_dir: Option<String>,
        /// How often it tells the scheduler it is alive (Flink's heartbeat.interval
        /// default); shorter than the scheduler's --executor-timeout, or the scheduler
        /// loses it.
        #[arg(long, default_value = "10 s")]
        heartbeat_interval: String,
    },
    /// Run a coordinator (Flink's job manager): workers register with it, and
    /// `weir run --cluster` runs jobs on them.
    Coordinator {
        /// Where to listen for workers and jobs (`host:port`).
        #[arg(long, default_value = "127.0.0.1:6123")]
        listen: String,
        /// A worker that sends nothing for this long is lost (Flink's heartbeat.timeout).
        #[arg(long, default_value = "50 s")]
        heartbeat_timeout: String,
        /// How long a job waits for enough task slots (Flink's slot.request.timeout).
        #[arg(long, default_value = "5 min")]
        slot_timeout: String,
        /// Folder or URL where the coordinator records the jobs it runs; a coordinator
        /// started again on it resumes them from their latest checkpoints (Flink's
        /// high-availability.storageDir).
        #[arg(long, value_name = "DIR")]
        ha_dir: Option<String>,
        /// Set a configuration key of the coordinator: its REST API and dashboard
        /// (rest.port, 8081 by default; rest.bind-address) and Prometheus endpoint
        /// (metrics.reporter.prom.port).
        #[arg(short = 'D', value_name = "KEY=VALUE")]
        define: Vec<String>,
    },
    /// Run a worker (Flink's task manager): it registers with a coordinator and runs the
    /// subtasks the coordinator places on it.
    Worker {
        /// The coordinator's address (`host:port`).
        #[arg(long)]
        coordinator: String,
        /// Subtasks of one operator it runs at once (Flink's taskmanager.numberOfTaskSlots).
        #[arg(long, default_value_t = 1)]
        slots: usize,
        /// Where its data endpoint listens (`host:port`; port 0 picks a free one).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// The host other workers reach it at (default: the listening host).
        #[arg(long)]
        advertised_host: Option<String>,
        /// How often it tells the coordinator it is alive (Flink's heartbeat.interval).
        #[arg(long, default_value = "10 s")]
        heartbeat_interval: String,
    },
    /// Stop a running job with a savepoint (Flink's `stop`).
    Stop {
        /// The job id (or a unique prefix of it), as `weir list` shows.
        job: String,
        /// Drain: end the input, fire everything, commit all; the job ends for good.
        /// Without it the job can resume from the savepoint with `--restore`.
        #[arg(long)]
        drain: bool,
        /// Folder or URL for the savepoint (default: execution.checkpointing.savepoint-dir
        /// of the job).
        #[arg(long)]
        savepoint_dir: Option<String>,
        /// The job runs on the cluster of the coordinator at this address.
        #[arg(long, value_name = "ADDRESS")]
        cluster: Option<String>,
    },
    /// List the jobs running on this machine for this user (or on a cluster).
    List {
        /// List the jobs of the coordinator at this address.
        #[arg(long, value_name = "ADDRESS")]
        cluster: Option<String>,
    },
    /// The interactive SQL shell (also what `weir` alone starts).
    Shell {
        /// Run this script first, then read statements interactively (Flink's -i).
        #[arg(short = 'i', long = "init")]
        init: Option<PathBuf>,
        /// Run this script and exit (Flink's -f).
        #[arg(short = 'f', long = "file")]
        file: Option<PathBuf>,
        /// Run streaming INSERTs on the cluster of the coordinator at this address
        /// (`host:port`), or batch queries on the Ballista cluster of this scheduler
        /// (`df://host:port`; the shell then starts in batch mode).
        #[arg(long, value_name = "ADDRESS")]
        cluster: Option<String>,
    },
}

/// The log filter for `spec` (`WEIR_LOG`, else `RUST_LOG`): a bare `info`, `debug` or
/// `trace` applies to Weir's own crates, its dependencies staying at `warn` (their debug
/// output is noise to a user); anything else (`debug,hyper=info`, `weir_runtime=trace`)
/// is an `EnvFilter` directive list used as written.
fn log_directives(spec: &str) -> String {
    let level = spec.trim().to_ascii_lowercase();
    match level.as_str() {
        "info" | "debug" | "trace" => format!("warn,weir={level}"),
        _ => spec.to_string(),
    }
}

/// mimalloc's `arena_eager_commit` and `allow_thp` options (their indexes in mimalloc 3's
/// `mi_option_e`).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Memory settings for a process whose state and batches come and go by the gigabyte.
///
/// By default mimalloc commits each arena (1 GiB) as soon as it reserves it, on systems
/// that overcommit memory such as Linux. The kernel then backs the arena with transparent
/// huge pages, zeroing 2 MiB at the first touch of each, again after every purge: a join
/// of Nexmark q20 spent two thirds of its CPU time in the kernel zeroing pages. Committed
/// on demand, the same job ran 1.6x as fast with a fifth of the system time.
/// `MIMALLOC_ARENA_EAGER_COMMIT` in the environment still decides.
///
/// Transparent huge pages are then still zeroed 2 MiB at a time wherever mimalloc asks
/// for them (it does for its large regions), and memory freed and taken again is zeroed
/// again: with them, Nexmark q20 spent 31% of its samples in the kernel's
/// `clear_page_erms`. They are off for the process (mimalloc's `allow_thp` = 0 and
/// `prctl(PR_SET_THP_DISABLE)`, as mimalloc does at start with `MIMALLOC_ALLOW_THP=0`)
/// unless `MIMALLOC_ALLOW_THP` is set. At 10M
/// events q5, q7, q9, q18, q19 and q20 ran 12-25% faster.
///
/// Freed memory goes back to the kernel after `purge_delay` (mimalloc: 10 ms), and the
/// next allocation faults it in again, zeroed: batches and encoded checkpoints come and
/// go faster than that. Kept for 1 s (`MIMALLOC_PURGE_DELAY` still decides), q5, q7, q18,
/// q19 and q20 ran 20-37% faster at 10M events, q9 as fast, with peak RSS within 4%.
#[allow(unsafe_code)]
fn tune_allocator() {
    // SAFETY (all four calls): mi_option_set only stores the value; it is not thread
    // safe, and this runs first in `main`, before any other thread exists. prctl with
    // PR_SET_THP_DISABLE takes integer arguments only; failing (an old kernel) only
    // leaves huge pages on.
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0) }
        #[cfg(target_os = "linux")]
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
    if std::env::var_os("MIMALLOC_ARENA_EAGER_COMMIT").is_none() {
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0) }
    }
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 1000) }
    }
}

fn main() {
    tune_allocator();
    // sqlparser logs every statement it parses at debug level ("Parsing sql '…'"), secrets
    // included: its debug lines never pass, whatever WEIR_LOG asks for.
    let spec = ["WEIR_LOG", "RUST_LOG"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.trim().is_empty()))
        .unwrap_or_else(|| "warn".into());
    let filter = tracing_subscriber::EnvFilter::try_new(log_directives(&spec))
        .unwrap_or_else(|e| {
            eprintln!("weir: ignoring WEIR_LOG/RUST_LOG '{spec}': {e}");
            "warn".into()
        })
        .add_directive("sqlparser=info".parse().expect("a valid directive"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // WEIR_LOG_FORMAT=json: one JSON object per line, for log collectors.
    if std::env::var("WEIR_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json")) {
        logs.json().with_current_span(false).init();
    } else {
        logs.with_ansi(std::io::stderr().is_terminal()).init();
    }
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            // With its causes: "cannot read 'x.sql': No such file or directory (os error 2)".
            eprintln!("error: {e:#}");
            1
        }
    };
    // Do not wait for detached background work (e.g. blocking file I/O) on exit.
    runtime.shutdown_timeout(Duration::from_millis(100));
    std::process::exit(code);
}

/// CPU time of this process so far, as `cpu <total>s (user <u>s, system <s>s)` (Linux);
/// empty elsewhere. System time is shown apart: it varies with the kernel's memory
/// management much more than user time does.
fn cpu_summary() -> String {
    let times = || -> Option<(f64, f64)> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the command name (which is in parentheses and may hold spaces).
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let user = fields.get(11)?.parse::<f64>().ok()? / 100.0;
        let system = fields.get(12)?.parse::<f64>().ok()? / 100.0;
        Some((user, system))
    };
    match times() {
        Some((u, s)) => format!(", cpu {:.2}s (user {u:.2}s, system {s:.2}s)", u + s),
        None => String::new(),
    }
}

/// Replaces `${NAME}` with the values of `--var NAME=VALUE`; a placeholder left without a
/// value is an error naming it.
fn fill_placeholders(sql: &str, vars: &[String]) -> anyhow::Result<String> {
    let mut out = sql.to_string();
    for v in vars {
        let Some((name, value)) = v.split_once('=') else {
            bail!("--var expects NAME=VALUE, got '{v}'")
        };
        out = out.replace(&format!("${{{}}}", name.trim()), value);
    }
    let mut missing: Vec<&str> = Vec::new();
    let mut rest = out.as_str();
    while let Some(start) = rest.find("${") {
        let Some(end) = rest[start..].find('}') else {
            break;
        };
        let name = &rest[start + 2..start + end];
        if !missing.contains(&name) {
            missing.push(name);
        }
        rest = &rest[start + end..];
    }
    if !missing.is_empty() {
        bail!(
            "the script has placeholders without a value: {}; pass --var NAME=VALUE",
            missing
                .iter()
                .map(|m| format!("${{{m}}}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(out)
}

/// Peak resident memory of this process (Linux), in MiB.
pub(crate) fn peak_rss_mb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

pub(crate) fn print_table(header: &[String], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: &[String]| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!(" {c:<w$} "))
            .collect();
        out!("|{}|", parts.join("|"));
    };
    let sep: Vec<String> = widths.iter().map(|w| "-".repeat(w + 2)).collect();
    out!("+{}+", sep.join("+"));
    line(header);
    out!("+{}+", sep.join("+"));
    for r in rows {
        line(r);
    }
    out!("+{}+", sep.join("+"));
}

async fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command.unwrap_or(Command::Shell {
        init: None,
        file: None,
        cluster: None,
    }) {
        Command::Shell {
            init,
            file,
            cluster,
        } => shell::run(init, file, cluster).await,
        Command::Stop {
            job,
            drain,
            savepoint_dir,
            cluster: None,
        } => control::stop(&job, drain, savepoint_dir).await,
        Command::Stop {
            job,
            drain,
            savepoint_dir,
            cluster: Some(address),
        } => {
            let request = weir_cluster::coordinator::StopRequest {
                job,
                drain,
                savepoint_dir,
            };
            let savepoint = weir_cluster::client::stop(&address, &request).await?;
            out!("Savepoint completed. Path: {savepoint}");
            Ok(0)
        }
        Command::List { cluster: None } => control::list().await,
        Command::List {
            cluster: Some(address),
        } => {
            for job in weir_cluster::client::list(&address).await? {
                out!(
                    "{}  {}  rows in {}  rows out {}  last checkpoint {}  restarts {}",
                    job.job_id,
                    job.status,
                    job.rows_in,
                    job.rows_out,
                    job.last_checkpoint
                        .map_or_else(|| "-".to_string(), |c| c.to_string()),
                    job.restarts
                );
                for (vertex, workers) in &job.placement {
                    out!("    {vertex}: subtasks on {}", workers.join(", "));
                }
            }
            Ok(0)
        }
        run @ Command::Run { .. } => run_script(run).await,
        Command::BallistaScheduler {
            listen,
            advertised_host,
            executor_timeout,
        } => {
            let listen: std::net::SocketAddr = listen
                .parse()
                .with_context(|| format!("--listen '{listen}' is not a host:port address"))?;
            let timeout = weir::common::config::parse_duration(&executor_timeout)?
                .as_secs()
                .max(1);
            eprintln!("weir: Ballista scheduler listening on {listen}");
            weir_ballista::process::run_scheduler(weir_ballista::process::SchedulerOptions {
                listen,
                external_host: advertised_host,
                executor_timeout_secs: timeout,
                // Looked for twice per timeout (Ballista warns when it is not shorter).
                expire_interval_secs: (timeout / 2).clamp(1, 15),
            })
            .await?;
            Ok(0)
        }
        Command::BallistaExecutor {
            scheduler,
            bind_host,
            advertised_host,
            flight_port,
            grpc_port,
            slots,
            work_dir,
            heartbeat_interval,
        } => {
            let scheduler = weir_ballista::scheduler_address(&scheduler)?;
            let at = format!("{}:{}", scheduler.0, scheduler.1);
            eprintln!(
                "weir: Ballista executor on {bind_host} (Flight port {flight_port}, task port \
                 {grpc_port}) joining the scheduler at {at}"
            );
            weir_ballista::process::run_executor(weir_ballista::process::ExecutorOptions {
                scheduler,
                bind_host,
                external_host: advertised_host,
                flight_port,
                grpc_port,
                slots,
                work_dir,
                heartbeat_interval_secs: weir::common::config::parse_duration(&heartbeat_interval)?
                    .as_secs()
                    .max(1),
            })
            .await?;
            // Ballista's executor ends quietly when its scheduler tells it to stop, as
            // the scheduler does with one it has lost.
            eprintln!(
                "weir: the Ballista executor stopped: its scheduler at {at} stopped it or \
                 went away (an executor the scheduler loses for want of heartbeats is \
                 stopped: keep --heartbeat-interval below the scheduler's --executor-timeout)"
            );
            Ok(1)
        }
        Command::Coordinator {
            listen,
            heartbeat_timeout,
            slot_timeout,
            ha_dir,
            define,
        } => {
            use weir::common::config::parse_duration;
            // Flink's job manager serves its REST API on 8081 unless told otherwise.
            let mut web = weir::common::Config::default();
            web.set("rest.port", "8081")?;
            for (k, v) in key_values(&define)? {
                web.set(&k, &v)?;
            }
            let c = weir_cluster::coordinator::Coordinator::start(
                weir_cluster::coordinator::CoordinatorConfig {
                    listen,
                    heartbeat_timeout: parse_duration(&heartbeat_timeout)?,
                    slot_timeout: parse_duration(&slot_timeout)?,
                    ha_dir,
                    web,
                },
            )
            .await?;
            eprintln!("weir: coordinator listening on {}", c.address);
            if let Some(addr) = c.rest {
                eprintln!("weir: REST API and dashboard at http://{addr}/");
            }
            if let Some(addr) = c.prometheus {
                eprintln!("weir: Prometheus metrics at http://{addr}/metrics");
            }
            futures::future::pending::<()>().await;
            Ok(0)
        }
        Command::Worker {
            coordinator,
            slots,
            listen,
            advertised_host,
            heartbeat_interval,
        } => {
            if slots == 0 {
                bail!("--slots must be at least 1");
            }
            weir_cluster::worker::run(weir_cluster::worker::WorkerConfig {
                coordinator,
                slots,
                data_listen: listen,
                advertised_host,
                heartbeat_interval: weir::common::config::parse_duration(&heartbeat_interval)?,
            })
            .await?;
            Ok(0)
        }
    }
}

/// The `KEY=VALUE` pairs of `-D` options.
fn key_values(define: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    define
        .iter()
        .map(|d| match d.split_once('=') {
            Some((k, v)) => Ok((k.trim().to_string(), v.trim().to_string())),
            None => bail!("-D expects KEY=VALUE, got '{d}'"),
        })
        .collect()
}

/// `weir run --cluster`: submits the job and waits for its end, with a progress line from
/// the coordinator's figures. Ctrl-C leaves the job running there.
async fn run_on_cluster(
    address: &str,
    job: &weir_cluster::JobDefinition,
    quiet: bool,
) -> anyhow::Result<i32> {
    use weir_cluster::coordinator::JobUpdate;
    let started = Instant::now();
    // The job's id once it started, for the progress line.
    let job_id = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    // A coordinator that restarts is waited for (and follows the job again) this long.
    let reconnect_for = Duration::from_secs(300);
    let submitted = {
        let job_id = job_id.clone();
        weir_cluster::client::submit(address, job, reconnect_for, move |update| {
            if let JobUpdate::Started {
                job_id: id,
                restored_from,
                placement,
            } = update
            {
                if !quiet {
                    eprintln!("weir: job {id} started on the cluster at {address}");
                    for (vertex, workers) in placement {
                        eprintln!("weir:   {vertex}: subtasks on {}", workers.join(", "));
                    }
                }
                if let Some(from) = restored_from {
                    eprintln!("weir: restored from {from}");
                }
                *job_id.lock().unwrap_or_else(|e| e.into_inner()) = Some(id.clone());
            }
        })
    };
    tokio::pin!(submitted);
    let tty = std::io::stderr().is_terminal();
    let every = Duration::from_secs(if tty { 1 } else { 10 });
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let mut shown = false;
    let ended = loop {
        tokio::select! {
            ended = &mut submitted => break ended?,
            _ = tick.tick(), if !quiet => {
                let id = job_id.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let Some(id) = id else { continue };
                // Figures are best effort: a coordinator that is restarting has none.
                let Ok(jobs) = weir_cluster::client::list(address).await else { continue };
                let Some(j) = jobs.iter().find(|j| j.job_id == id) else { continue };
                let secs = started.elapsed().as_secs_f64();
                let line = format!(
                    "weir: {secs:.0}s  {}  rows in {} ({:.0}/s)  rows out {}  last checkpoint {}  restarts {}",
                    j.status,
                    j.rows_in,
                    j.rows_in as f64 / secs.max(0.001),
                    j.rows_out,
                    j.last_checkpoint.map_or_else(|| "-".to_string(), |c| c.to_string()),
                    j.restarts,
                );
                if tty { eprint!("\r{line}\x1b[K"); } else { eprintln!("{line}"); }
                shown = true;
            }
            _ = tokio::signal::ctrl_c() => {
                if tty && shown { eprintln!(); }
                eprintln!(
                    "weir: interrupted; the job goes on running on the cluster (stop it with \
                     `weir stop --cluster {address} JOB`)"
                );
                return Ok(130);
            }
        }
    };
    if tty && shown {
        eprintln!();
    }
    if let (
        JobUpdate::Finished {
            checkpoints,
            restarts,
            rows_in,
            rows_out,
            ..
        },
        false,
    ) = (ended, quiet)
    {
        eprintln!(
            "weir: job finished on the cluster in {:.1}s: {rows_in} rows in, {rows_out} rows \
             out, {checkpoints} checkpoints{}",
            started.elapsed().as_secs_f64(),
            match restarts {
                0 => String::new(),
                n => format!(", {n} restarts after failures"),
            }
        );
    }
    Ok(0)
}

/// ` (mean 120 ms, max 800 ms, 3.1 MB written per checkpoint, largest 40.2 MB)`: what the
/// job's completed checkpoints took and wrote, and the most state one referred to, for the
/// summary line (and the benchmarks that read it).
fn checkpoint_summary(h: &weir::runtime::metrics::CheckpointHistory) -> String {
    if h.completed == 0 {
        return String::new();
    }
    format!(
        " (mean {} ms, max {} ms, {:.1} MB written per checkpoint, largest {:.1} MB)",
        h.total_duration_ms / h.completed,
        h.max_duration_ms,
        h.total_written as f64 / h.completed as f64 / 1e6,
        h.max_state_size as f64 / 1e6
    )
}

async fn run_script(command: Command) -> anyhow::Result<i32> {
    let Command::Run {
        files,
        mode,
        parallelism,
        checkpoint_dir,
        checkpoint_interval,
        restore,
        define,
        vars,
        quiet,
        cluster,
    } = command
    else {
        unreachable!("run_script takes Command::Run")
    };
    let mut scripts = Vec::new();
    for file in &files {
        let sql = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read '{}'", file.display()))?;
        let sql = fill_placeholders(&sql, &vars)
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        scripts.push((file.display().to_string(), sql));
    }
    let last_file = scripts.last().map(|s| s.0.clone()).unwrap_or_default();
    let in_file = |e: weir::Error| anyhow::anyhow!("{last_file}: {e}");
    // Command-line settings win over the script's SET statements: they are applied before
    // the script and again after each statement.
    let mut settings = key_values(&define)?;
    if let Some(m) = mode {
        let mode = match m {
            Mode::Streaming => "streaming",
            Mode::Batch => "batch",
        };
        settings.push(("execution.runtime-mode".into(), mode.into()));
    }
    if let Some(p) = parallelism {
        settings.push(("parallelism.default".into(), p.to_string()));
    }
    if let Some(dir) = &checkpoint_dir {
        settings.push(("execution.checkpointing.dir".into(), dir.clone()));
    }
    if let Some(i) = &checkpoint_interval {
        settings.push(("execution.checkpointing.interval".into(), i.clone()));
    }
    let ballista = cluster.clone().filter(|c| weir_ballista::is_ballista(c));
    if let Some(address) = cluster.filter(|c| !weir_ballista::is_ballista(c)) {
        let job = weir_cluster::JobDefinition {
            scripts,
            settings,
            restore,
        };
        return run_on_cluster(&address, &job, quiet).await;
    }
    let mut engine = Engine::default();
    let apply_overrides = |config: &mut weir::Config| -> anyhow::Result<()> {
        for (k, v) in &settings {
            config.set(k, v)?;
        }
        Ok(())
    };
    apply_overrides(engine.config_mut())?;
    if let Some(address) = &ballista {
        weir_ballista::check_scheduler(address).await?;
        engine.set_batch_cluster(weir_ballista::client_session(
            address,
            engine.config().slot_request_timeout(),
        )?);
    }
    let mut plans = Vec::new();
    let mut batch_queries = Vec::new();
    for (name, sql) in &scripts {
        let here = |e: weir::Error| anyhow::anyhow!("{name}: {e}");
        for stmt in &engine.parse(sql).map_err(here)? {
            match engine.execute(stmt).await.map_err(here)? {
                Outcome::Done(_) => {}
                Outcome::Table { header, rows } => print_table(&header, &rows),
                Outcome::Explain(text) => out!("{text}"),
                Outcome::Job(parts) => plans.extend(parts),
                Outcome::Batch(queries) => batch_queries.extend(queries),
                Outcome::JobControl(_) => {
                    bail!(
                        "{name}: SHOW JOBS and STOP JOB belong to the shell; use `weir list` and `weir stop`"
                    )
                }
            }
            apply_overrides(engine.config_mut())?;
        }
    }
    if let (Some(address), false) = (&ballista, plans.is_empty()) {
        bail!(
            "{last_file}: {address} is a Ballista cluster, which runs batch jobs only: run \
             the script with --mode batch (or SET 'execution.runtime-mode' = 'batch'), or \
             run a streaming job on a Weir coordinator (--cluster host:port)"
        );
    }
    if !batch_queries.is_empty() {
        let started = Instant::now();
        let mut written = 0;
        for query in &batch_queries {
            match engine.run_batch(query).await.map_err(in_file)? {
                weir::engine::BatchResult::Rows(batches) => {
                    out!("{}", arrow::util::pretty::pretty_format_batches(&batches)?);
                    let n: usize = batches.iter().map(|b| b.num_rows()).sum();
                    out!("{n} row(s) in set");
                }
                weir::engine::BatchResult::Written(n) => written += n,
            }
        }
        if !quiet {
            eprintln!(
                "weir: batch job finished{} in {:.1}s: {written} rows committed{}{}",
                ballista
                    .as_ref()
                    .map(|a| format!(" on the Ballista cluster at {a}"))
                    .unwrap_or_default(),
                started.elapsed().as_secs_f64(),
                peak_rss_mb()
                    .map(|mb| format!(", peak RSS {mb} MB"))
                    .unwrap_or_default(),
                cpu_summary()
            );
        }
    }
    if plans.is_empty() {
        return Ok(0);
    }
    let restore = restore.map(|r| {
        if r == "latest" {
            RestoreFrom::Latest
        } else {
            RestoreFrom::Path(r)
        }
    });
    let graph = engine.build_job(&plans).await.map_err(in_file)?;
    let control_dir = control::prepare()?;
    let job = engine.start(graph, restore).await?;
    if !quiet {
        eprintln!("weir: job {} started", job.job_id);
    }
    if let Some(addr) = engine.rest_address() {
        eprintln!("weir: REST API and dashboard at http://{addr}/");
    }
    if let Some(addr) = engine.prometheus_address() {
        eprintln!("weir: Prometheus metrics at http://{addr}/metrics");
    }
    if let Some(from) = &job.restored_from {
        eprintln!("weir: restored from {from}");
    }
    let socket = control::serve(&control_dir, &job, engine.config().savepoint_dir())?;
    let metrics = job.metrics.clone();
    let started = Instant::now();
    let tty = std::io::stderr().is_terminal();
    let progress_every = if tty {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(10)
    };
    let waiter = job.wait();
    tokio::pin!(waiter);
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + progress_every, progress_every);
    let mut shown = false;
    let result = loop {
        tokio::select! {
            r = &mut waiter => break r,
            _ = tick.tick(), if !quiet => {
                let secs = started.elapsed().as_secs_f64();
                let rows_in = metrics.rows_in();
                let line = format!(
                    "weir: {:.0}s  rows in {rows_in} ({:.0}/s)  rows out {}  last checkpoint {}  state {:.1} MB",
                    secs,
                    rows_in as f64 / secs.max(0.001),
                    metrics.rows_out(),
                    metrics.last_checkpoint().map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
                    metrics.state_bytes() as f64 / 1e6,
                );
                if tty { eprint!("\r{line}\x1b[K"); } else { eprintln!("{line}"); }
                shown = true;
            }
            _ = tokio::signal::ctrl_c() => {
                if tty && shown { eprintln!(); }
                eprintln!("weir: interrupted; the job was cancelled (restart with --restore latest to resume)");
                return Ok(130);
            }
        }
    };
    if tty && shown {
        eprintln!();
    }
    drop(socket);
    let outcome = result?;
    if let Some(savepoint) = control::stopped_with() {
        eprintln!(
            "weir: job {} stopped with savepoint {savepoint}",
            outcome.job_id
        );
    }
    if !quiet {
        eprintln!(
            "weir: job {} finished in {:.1}s: {} rows in, {} rows out, {} checkpoints{}{}{}{}{}{}",
            outcome.job_id,
            started.elapsed().as_secs_f64(),
            metrics.rows_in(),
            metrics.rows_out(),
            outcome.checkpoints_completed,
            checkpoint_summary(&metrics.checkpoint_history()),
            match outcome.restarts {
                0 => String::new(),
                n => format!(", {n} restarts after failures"),
            },
            match metrics.records_in_errors() {
                0 => String::new(),
                n => format!(", {n} unreadable records or fields skipped"),
            },
            match metrics.state_bytes_peak() {
                0 => String::new(),
                b => format!(", operator state up to {:.1} MB", b as f64 / 1e6),
            },
            peak_rss_mb()
                .map(|mb| format!(", peak RSS {mb} MB"))
                .unwrap_or_default(),
            cpu_summary()
        );
    }
    Ok(0)
}
