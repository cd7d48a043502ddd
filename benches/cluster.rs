//! One process against a cluster on the same cores: Nexmark queries at parallelism 2,
//! once in one `weir run` process, once on a local cluster of a coordinator and two
//! workers of one slot each (`weir run --cluster`), so each query's subtasks are split
//! over two processes and its exchanges cross Arrow Flight. Prints, per run: wall time,
//! events/s, CPU seconds of the processes that ran the tasks, and the ratio of the
//! cluster's throughput to one process's; and the CPU the cluster spent per event more
//! than one process (the cost of the network exchange, serialization included).
//!
//! `cargo bench --bench cluster`; environment: `WEIR_CLUSTER_QUERIES` (default
//! `q0,q5,q8,q20`), `WEIR_CLUSTER_EVENTS` (default 10 000 000),
//! `WEIR_CLUSTER_CHECKPOINT_INTERVAL` (default 10 s).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sql-examples/nexmark")
}

/// CPU seconds (user + system) a process used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

fn weir() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    c.env("TZ", "UTC");
    c
}

struct Cluster {
    address: String,
    processes: Vec<Child>,
}

impl Cluster {
    fn start(dir: &Path) -> Cluster {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let address = format!("127.0.0.1:{port}");
        let coordinator = weir()
            .args(["coordinator", "--listen", &address, "-D", "rest.port=0"])
            .stderr(std::fs::File::create(dir.join("coordinator.log")).unwrap())
            .spawn()
            .unwrap();
        let mut processes = vec![coordinator];
        for i in 0..2 {
            let log = dir.join(format!("worker-{i}.log"));
            processes.push(
                weir()
                    .args(["worker", "--coordinator", &address, "--slots", "1"])
                    .stderr(std::fs::File::create(&log).unwrap())
                    .spawn()
                    .unwrap(),
            );
            let started = Instant::now();
            while !std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("registered")
            {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "worker {i} did not register"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Cluster { address, processes }
    }

    /// CPU seconds of the coordinator and the workers so far.
    fn cpu(&self) -> f64 {
        self.processes.iter().map(|p| cpu_seconds(p.id())).sum()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in &mut self.processes {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

/// Runs `weir run` with `args`; returns (wall seconds, CPU seconds of the process).
fn run_local(args: &[&str]) -> (f64, f64) {
    let started = Instant::now();
    let mut child = weir()
        .arg("run")
        .arg("--quiet")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut cpu = 0.0;
    // Sampled until the end: a reaped process has no /proc entry.
    while child.try_wait().unwrap().is_none() {
        cpu = f64::max(cpu, cpu_seconds(child.id()));
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "weir {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (started.elapsed().as_secs_f64(), cpu)
}

/// Runs the job on the cluster; returns (wall seconds, CPU seconds of the cluster).
fn run_cluster(cluster: &Cluster, args: &[&str]) -> (f64, f64) {
    let before = cluster.cpu();
    let started = Instant::now();
    let out = weir()
        .args(["run", "--quiet", "--cluster", &cluster.address])
        .args(args)
        .output()
        .unwrap();
    let wall = started.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "weir --cluster {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (wall, cluster.cpu() - before)
}

fn main() {
    let queries = std::env::var("WEIR_CLUSTER_QUERIES").unwrap_or_else(|_| "q0,q5,q8,q20".into());
    let events: u64 = std::env::var("WEIR_CLUSTER_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let interval =
        std::env::var("WEIR_CLUSTER_CHECKPOINT_INTERVAL").unwrap_or_else(|_| "10 s".into());
    let dir = std::env::temp_dir().join(format!("weir-cluster-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cluster = Cluster::start(&dir);
    let ddl = root().join("ddl.sql");
    let events_var = format!("EVENTS_NUM={events}");
    println!(
        "{:<6} {:<8} {:>8} {:>12} {:>8} {:>7} {:>14}",
        "query", "where", "wall s", "events/s", "cpu s", "ratio", "extra cpu/event"
    );
    for (i, q) in queries.split(',').map(str::trim).enumerate() {
        let query = root().join(format!("{q}.sql"));
        let chk = |what: &str| dir.join(format!("chk-{i}-{what}"));
        let (local_chk, cluster_chk) = (chk("local"), chk("cluster"));
        let args = |chk: &Path| -> Vec<String> {
            [
                ddl.to_str().unwrap(),
                query.to_str().unwrap(),
                "-p",
                "2",
                "--checkpoint-dir",
                chk.to_str().unwrap(),
                "--checkpoint-interval",
                &interval,
                "--var",
                "TPS=10000000",
                "--var",
                &events_var,
                "--var",
                "PERSON_PROPORTION=1",
                "--var",
                "AUCTION_PROPORTION=3",
                "--var",
                "BID_PROPORTION=46",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        };
        let local_args = args(&local_chk);
        let cluster_args = args(&cluster_chk);
        let (lw, lc) = run_local(&local_args.iter().map(String::as_str).collect::<Vec<_>>());
        let (cw, cc) = run_cluster(
            &cluster,
            &cluster_args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let rate = |wall: f64| events as f64 / wall;
        println!(
            "{q:<6} {:<8} {lw:>8.2} {:>12.0} {lc:>8.2} {:>7} {:>14}",
            "process",
            rate(lw),
            "",
            ""
        );
        println!(
            "{q:<6} {:<8} {cw:>8.2} {:>12.0} {cc:>8.2} {:>7.2} {:>11.0} ns",
            "cluster",
            rate(cw),
            lw / cw,
            (cc - lc) / events as f64 * 1e9
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
