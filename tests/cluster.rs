//! A cluster on this machine: one `weir coordinator` and three `weir worker` processes on
//! 127.0.0.1, jobs submitted with `weir run --cluster`. The golden queries give the rows
//! of one process, and SIGKILLed workers lose and duplicate no committed row.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Processes of a local cluster, killed when dropped. Each one's stderr goes to a file in
/// `logs`, shown when a test fails.
struct LocalCluster {
    address: String,
    coordinator: Child,
    workers: Vec<Child>,
    logs: PathBuf,
    started: usize,
    coordinators: usize,
    worker_env: Vec<(String, String)>,
}

/// Starts a coordinator on `address` that records its jobs under `logs/ha`.
fn start_coordinator(address: &str, logs: &Path, n: usize) -> Child {
    let ha = logs.join("ha");
    weir()
        .args([
            "coordinator",
            "--listen",
            address,
            "--heartbeat-timeout",
            "3 s",
        ])
        .args(["--slot-timeout", "1 s"])
        .args(["--ha-dir", ha.to_str().unwrap()])
        .args(["-D", "rest.port=0"])
        .env("WEIR_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(logs.join(format!("coordinator-{n}.log"))).unwrap())
        .spawn()
        .unwrap()
}

impl LocalCluster {
    fn start(workers: usize, logs: &Path) -> LocalCluster {
        Self::start_with(workers, logs, &[])
    }

    /// A cluster whose workers run with the environment variables `worker_env`.
    fn start_with(workers: usize, logs: &Path, worker_env: &[(&str, &str)]) -> LocalCluster {
        let address = format!("127.0.0.1:{}", free_port());
        let mut cluster = LocalCluster {
            coordinator: start_coordinator(&address, logs, 1),
            address,
            workers: Vec::new(),
            logs: logs.to_path_buf(),
            started: 0,
            coordinators: 1,
            worker_env: worker_env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        for _ in 0..workers {
            let w = cluster.start_worker();
            cluster.workers.push(w);
        }
        cluster
    }

    /// SIGKILLs the coordinator and starts a new one on the same address and records.
    fn restart_coordinator(&mut self) {
        self.coordinator.kill().unwrap();
        self.coordinator.wait().unwrap();
        self.coordinators += 1;
        self.coordinator = start_coordinator(&self.address, &self.logs, self.coordinators);
    }

    /// Starts a worker and waits until it registered.
    fn start_worker(&mut self) -> Child {
        self.started += 1;
        let log = self.logs.join(format!("worker-{}.log", self.started));
        let child = weir()
            .args([
                "worker",
                "--coordinator",
                &self.address,
                "--heartbeat-interval",
                "500 ms",
            ])
            .env("WEIR_LOG", "info")
            .envs(self.worker_env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("registered with the coordinator")
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "a worker did not register:\n{}",
                self.all_logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    fn all_logs(&self) -> String {
        let mut names: Vec<_> = std::fs::read_dir(&self.logs)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        names.sort();
        names
            .iter()
            .map(|p| {
                let text = std::fs::read_to_string(p).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                format!(
                    "--- {}\n{}",
                    p.file_name().unwrap().to_string_lossy(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `weir run --cluster` with `args`, as a child process.
    fn submit(&self, args: &[&str]) -> Child {
        weir()
            .args(["run", "--cluster", &self.address])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Submits and waits for the job's end, which must be a success.
    fn run_ok(&self, args: &[&str]) -> String {
        let mut child = self.submit(args);
        let status = child.wait().unwrap();
        let err = stderr_of(&mut child);
        assert!(
            status.success(),
            "weir run --cluster {args:?} failed: {err}\n{}",
            self.all_logs()
        );
        err
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for w in &mut self.workers {
            let _ = w.kill();
            let _ = w.wait();
        }
        let _ = self.coordinator.kill();
        let _ = self.coordinator.wait();
    }
}

/// Every golden script (see `golden.rs`) as its checkpointed run goes there (parallelism
/// 2, checkpoints every 100 ms), its subtasks on two of the three workers: the committed
/// rows are the golden file's. (Not at parallelism 3: a job started at 3 splits its
/// generators three ways, and the temporal join's versions then depend on how the splits
/// interleave, in one process as on a cluster.)
#[test]
fn golden_queries_on_a_cluster_give_the_rows_of_one_process() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, tmp.path());
    let names = golden_names();
    assert!(names.len() >= 20, "{names:?}");
    for name in &names {
        let (template, expected) = golden(name);
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out");
        let script = write_script(
            &dir,
            "job.sql",
            &render(&template, &[("out", out.to_str().unwrap())]),
        );
        let chk = dir.join("chk");
        let err = cluster.run_ok(&[
            script.to_str().unwrap(),
            "-p",
            "2",
            "--checkpoint-dir",
            chk.to_str().unwrap(),
            "--checkpoint-interval",
            "100 ms",
        ]);
        // `weir run` shows where each operator's two subtasks ran: on two workers.
        let spread = err
            .lines()
            .filter_map(|l| l.split_once(": subtasks on ").map(|(_, at)| at))
            .any(|at| matches!(at.split(", ").collect::<Vec<_>>()[..], [a, b] if a != b));
        assert!(spread, "{name}: no operator shown on two workers: {err}");
        // The workers' row counts reach the coordinator.
        let rows_in: u64 = err
            .split(" rows in")
            .next()
            .and_then(|s| s.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(rows_in > 0, "{name}: no rows counted: {err}");
        let got = materialize(committed_lines(&out));
        let missing: Vec<_> = expected
            .iter()
            .filter(|l| !got.contains(l))
            .take(5)
            .collect();
        let extra: Vec<_> = got
            .iter()
            .filter(|l| !expected.contains(l))
            .take(5)
            .collect();
        assert!(
            got == expected,
            "{name}: the cluster committed {} rows, the golden file has {}; missing (first \
             5): {missing:?}; not expected (first 5): {extra:?}\n{}",
            got.len(),
            expected.len(),
            cluster.all_logs()
        );
    }
}

/// A job of 30 000 rows through a keyed TUMBLE aggregate (a hash exchange between the
/// workers) at parallelism 3, about 12 s long, restarting after failures: its script
/// and its arguments.
fn windowed_job(dir: &Path) -> (PathBuf, Vec<String>) {
    let out = dir.join("out");
    let chk = dir.join("chk");
    let script = write_script(
        dir,
        "job.sql",
        &format!(
            "CREATE TABLE gen (
               seq BIGINT,
               ts AS TO_TIMESTAMP_LTZ(1717200000000 + seq * 10, 3),
               WATERMARK FOR ts AS ts
             ) WITH (
               'connector' = 'datagen', 'rows-per-second' = '2500',
               'fields.seq.kind' = 'sequence', 'fields.seq.start' = '0',
               'fields.seq.end' = '29999'
             );
             CREATE TABLE counts (k BIGINT, window_start TIMESTAMP(3), n BIGINT, total BIGINT)
               WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');
             INSERT INTO counts
             SELECT seq % 10, window_start, COUNT(*), SUM(seq)
             FROM TABLE(TUMBLE(TABLE gen, DESCRIPTOR(ts), INTERVAL '1' SECOND))
             GROUP BY seq % 10, window_start, window_end;",
            out.display()
        ),
    );
    let args = [
        script.to_str().unwrap(),
        "-p",
        "3",
        "--checkpoint-dir",
        chk.to_str().unwrap(),
        "--checkpoint-interval",
        "200 ms",
        "-D",
        "restart-strategy.type=fixed-delay",
        "-D",
        "restart-strategy.fixed-delay.attempts=1000",
        "-D",
        "restart-strategy.fixed-delay.delay=200 ms",
    ];
    (out, args.iter().map(|a| a.to_string()).collect())
}

/// Window w (of 100 rows: seq 100w .. 100w+99) holds 10 rows of each k = seq % 10: every
/// one of the 3 000 (k, window) rows is committed once, with its count and sum.
fn assert_windows_exactly_once(out: &Path) {
    let mut seen = std::collections::BTreeMap::new();
    for line in committed_lines(out) {
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let key = (
            v["k"].as_i64().unwrap(),
            v["window_start"].as_str().unwrap().to_string(),
        );
        let row = (v["n"].as_i64().unwrap(), v["total"].as_i64().unwrap());
        assert!(
            seen.insert(key.clone(), row).is_none(),
            "window {key:?} committed twice"
        );
    }
    assert_eq!(seen.len(), 3000, "windows committed: {}", seen.len());
    let mut expected_total = std::collections::BTreeMap::new();
    for seq in 0..30_000i64 {
        *expected_total.entry((seq % 10, seq / 100)).or_insert(0) += seq;
    }
    let mut totals: Vec<(i64, i64)> = seen.values().copied().collect();
    totals.sort();
    let mut expected: Vec<(i64, i64)> = expected_total.values().map(|&t| (10, t)).collect();
    expected.sort();
    assert_eq!(totals, expected, "counts or sums of windows differ");
}

/// Kills something of `cluster` `kills` times, 400–1200 ms apart, while `job` runs; then
/// waits for the job to end well and returns its stderr.
fn kill_while_running(
    cluster: &mut LocalCluster,
    job: &mut Child,
    kills: usize,
    mut kill: impl FnMut(&mut LocalCluster, u64),
) -> String {
    let mut random = Lcg(0x9e37_79b9_7f4a_7c15);
    let mut done = 0;
    while done < kills {
        std::thread::sleep(Duration::from_millis(400 + random.next(800)));
        if job.try_wait().unwrap().is_some() {
            break;
        }
        kill(cluster, random.next(1 << 20));
        done += 1;
    }
    let deadline = Instant::now() + Duration::from_secs(240);
    let status = loop {
        if let Some(status) = job.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the job did not finish after {done} kills:\n{}",
            cluster.all_logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = stderr_of(job);
    assert!(
        status.success(),
        "the job failed: {err}\n{}",
        cluster.all_logs()
    );
    assert_eq!(
        done, kills,
        "the job finished after only {done} kills; slow its source down"
    );
    err
}

/// The windowed job at parallelism 3; a worker is SIGKILLed ten times at random moments
/// and a new one started each time. The job restarts from its latest checkpoint on the
/// workers there are, and every window is committed exactly once.
#[test]
fn killed_workers_lose_and_duplicate_no_committed_row() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(3, tmp.path());
    let (out, args) = windowed_job(tmp.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut job = cluster.submit(&args);
    let err = kill_while_running(&mut cluster, &mut job, 10, |cluster, r| {
        let victim = r as usize % cluster.workers.len();
        let mut w = cluster.workers.remove(victim);
        w.kill().unwrap();
        w.wait().unwrap();
        let replacement = cluster.start_worker();
        cluster.workers.push(replacement);
    });
    assert!(err.contains("restarts after failures"), "{err}");
    assert_windows_exactly_once(&out);
}

/// The windowed job; the coordinator is SIGKILLed three times and started again on its
/// records. Each new coordinator resumes the job from its latest checkpoint on the
/// workers (which register again), the submitting `weir run` follows it there, and every
/// window is committed exactly once.
#[test]
fn a_killed_coordinator_resumes_its_job_exactly_once() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(3, tmp.path());
    let (out, args) = windowed_job(tmp.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut job = cluster.submit(&args);
    kill_while_running(&mut cluster, &mut job, 3, |cluster, _| {
        cluster.restart_coordinator();
    });
    let resumed = (2..=4)
        .filter(|n| {
            std::fs::read_to_string(tmp.path().join(format!("coordinator-{n}.log")))
                .unwrap()
                .contains("resuming job")
        })
        .count();
    assert_eq!(
        resumed,
        3,
        "every new coordinator resumes the job\n{}",
        cluster.all_logs()
    );
    assert_windows_exactly_once(&out);
}

/// Resident memory of a process, in MB.
fn rss_mb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// Back-pressure crosses the network: rows of 1 kB are generated as fast as two source
/// subtasks can, on two workers, into one slow sink (0.2 s per batch) on the first; the
/// second worker's rows reach it over Flight. Unchecked, the sources would make about a
/// gigabyte in the seconds watched; both workers must stay small while the job runs.
#[test]
fn a_slow_sink_slows_a_source_on_another_worker() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start_with(
        2,
        tmp.path(),
        &[("WEIR_FAILPOINTS", "blackhole-batch=sleep:200")],
    );
    let script = write_script(
        tmp.path(),
        "job.sql",
        "CREATE TABLE gen (seq BIGINT, payload STRING) WITH (
           'connector' = 'datagen', 'fields.seq.kind' = 'sequence',
           'fields.seq.start' = '0', 'fields.seq.end' = '9999999',
           'fields.payload.length' = '1000', 'rows-per-second' = '1000000000');
         CREATE TABLE slow (seq BIGINT, payload STRING)
           WITH ('connector' = 'blackhole', 'sink.parallelism' = '1');
         INSERT INTO slow SELECT * FROM gen;",
    );
    let chk = tmp.path().join("chk");
    let mut job = cluster.submit(&[
        script.to_str().unwrap(),
        "-p",
        "2",
        "--checkpoint-dir",
        chk.to_str().unwrap(),
    ]);
    let mut peak = [0u64; 2];
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(6) {
        assert!(
            job.try_wait().unwrap().is_none(),
            "the job ended: the sink did not hold the sources back\n{}",
            cluster.all_logs()
        );
        for (p, w) in peak.iter_mut().zip(&cluster.workers) {
            *p = (*p).max(rss_mb(w.id()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = job.kill();
    let _ = job.wait();
    eprintln!("peak RSS of the workers: {peak:?} MB");
    assert!(
        peak.iter().all(|&mb| mb > 0 && mb < 400),
        "peak RSS of the workers: {peak:?} MB\n{}",
        cluster.all_logs()
    );
}

/// Mistakes around a cluster are named, and the process ends with an error.
#[test]
fn cluster_misuse_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let script = write_script(
        tmp.path(),
        "job.sql",
        "CREATE TABLE gen (seq BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '10');
         CREATE TABLE out (seq BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO out SELECT * FROM gen;",
    );
    let (s, chk) = (script.to_str().unwrap(), tmp.path().join("chk"));
    let c = chk.to_str().unwrap();
    let failed = |out: std::process::Output| {
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };

    // No coordinator at the address: said at once, not waited for.
    let nobody = format!("127.0.0.1:{}", free_port());
    let started = Instant::now();
    let err = failed(
        weir()
            .args(["run", "--cluster", &nobody, s])
            .output()
            .unwrap(),
    );
    assert!(err.contains(&nobody), "{err}");
    assert!(started.elapsed() < Duration::from_secs(20), "{err}");

    let cluster = LocalCluster::start(1, tmp.path());
    let run = |args: &[&str]| {
        let mut child = cluster.submit(args);
        let status = child.wait().unwrap();
        assert!(!status.success(), "weir run --cluster {args:?} succeeded");
        stderr_of(&mut child)
    };
    let err = run(&[s]);
    assert!(err.contains("needs execution.checkpointing.dir"), "{err}");
    assert!(
        !err.contains("error: configuration error: configuration error"),
        "{err}"
    );
    let err = run(&[s, "--checkpoint-dir", c, "--mode", "batch"]);
    assert!(
        err.contains("batch mode does not run on a cluster"),
        "{err}"
    );
    // One worker of one slot, a job at parallelism 2.
    let err = run(&[s, "--checkpoint-dir", c, "-p", "2"]);
    assert!(
        err.contains("needs 2 task slots") && err.contains("has 1 on 1 worker"),
        "{err}"
    );
    let err = run(&["/no/such/script.sql"]);
    assert!(err.contains("/no/such/script.sql"), "{err}");
    // The cluster still runs a job that fits.
    cluster.run_ok(&[s, "--checkpoint-dir", c, "-p", "1"]);
}

/// Sends `signal` (`STOP`, `CONT`) to a process.
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// A worker that hangs (SIGSTOP: its connections stay open, it sends nothing) is lost once
/// `heartbeat.timeout` (3 s here) passes, and the job restarts without it on a new
/// worker. When the hung worker wakes up (SIGCONT), its part of the old attempt has been
/// cancelled: it commits nothing of it, and it registers again. Twice; every window is
/// committed exactly once.
#[test]
fn a_hung_worker_is_lost_by_heartbeat_and_commits_nothing_stale() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(3, tmp.path());
    let (out, args) = windowed_job(tmp.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut job = cluster.submit(&args);
    kill_while_running(&mut cluster, &mut job, 2, |cluster, r| {
        let victim = r as usize % cluster.workers.len();
        let pid = cluster.workers[victim].id();
        signal(pid, "STOP");
        let replacement = cluster.start_worker();
        cluster.workers.push(replacement);
        std::thread::sleep(Duration::from_secs(4));
        signal(pid, "CONT");
    });
    let log = std::fs::read_to_string(tmp.path().join("coordinator-1.log")).unwrap();
    assert!(
        log.matches("sent no heartbeat for 3000 ms").count() >= 2,
        "the hung workers were not lost by heartbeat timeout\n{}",
        cluster.all_logs()
    );
    assert_windows_exactly_once(&out);
}

/// `weir list --cluster` shows the running job and where its subtasks run; `weir stop
/// --cluster` stops it with a savepoint (without drain); the job resumed on the cluster
/// from the savepoint commits every window exactly once, though its coordinator is
/// SIGKILLed before it completes a checkpoint of its own (the new coordinator resumes it
/// from the savepoint, not from scratch: its checkpoint folder is a new one).
#[test]
fn a_cluster_job_stops_with_a_savepoint_and_resumes_from_it() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(3, tmp.path());
    let (out, args) = windowed_job(tmp.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut job = cluster.submit(&args);
    let started = Instant::now();
    while !has_checkpoint(&tmp.path().join("chk")) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{}",
            cluster.all_logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Workers report their row counts every second.
    let list = || {
        let listed = weir()
            .args(["list", "--cluster", &cluster.address])
            .output()
            .unwrap();
        String::from_utf8_lossy(&listed.stdout).to_string()
    };
    let mut listed = list();
    while listed.contains("rows in 0 ") && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
        listed = list();
    }
    assert!(
        listed.contains("RUNNING") && listed.contains("subtasks on"),
        "{listed}"
    );
    assert!(!listed.contains("rows in 0 "), "{listed}");
    let job_id = listed.split_whitespace().next().unwrap().to_string();

    let savepoints = tmp.path().join("savepoints");
    let stopped = weir()
        .args(["stop", "--cluster", &cluster.address, &job_id[..8]])
        .args(["--savepoint-dir", savepoints.to_str().unwrap()])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&stopped.stdout).to_string();
    assert!(
        stopped.status.success(),
        "{said}{}\n{}",
        String::from_utf8_lossy(&stopped.stderr),
        cluster.all_logs()
    );
    let savepoint = said
        .trim()
        .strip_prefix("Savepoint completed. Path: ")
        .unwrap_or_else(|| panic!("{said}"))
        .to_string();
    let status = job.wait().unwrap();
    assert!(status.success(), "{}", stderr_of(&mut job));
    let windows = committed_lines(&out).len();
    assert!(
        windows < 3000,
        "the job ended before it was stopped ({windows} rows)"
    );

    // Resumed into a new checkpoint folder, with checkpoints a minute apart: it completes
    // none before the coordinator is killed.
    let (chk, chk2) = (tmp.path().join("chk"), tmp.path().join("chk2"));
    let mut resumed: Vec<&str> = args
        .iter()
        .map(|a| match *a {
            "200 ms" => "60 s",
            a if Path::new(a) == chk => chk2.to_str().unwrap(),
            a => a,
        })
        .collect();
    resumed.extend(["--restore", &savepoint]);
    let mut job = cluster.submit(&resumed);
    let log = tmp.path().join("coordinator-1.log");
    wait_until("the resumed job starts", &cluster, || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let started = |l: &&str| l.contains(" job ") && l.ends_with(" started");
        text.lines().filter(started).count() >= 2
    });
    std::thread::sleep(Duration::from_secs(1));
    cluster.restart_coordinator();
    let status = job.wait().unwrap();
    let err = stderr_of(&mut job);
    assert!(status.success(), "{err}\n{}", cluster.all_logs());
    assert!(err.contains("restored from"), "{err}");
    let again = std::fs::read_to_string(tmp.path().join("coordinator-2.log")).unwrap();
    assert!(again.contains("resuming job"), "{again}");
    assert_windows_exactly_once(&out);
}

/// Where the coordinator's REST API listens, from its log.
fn rest_address(logs: &Path) -> String {
    let started = Instant::now();
    loop {
        let log = std::fs::read_to_string(logs.join("coordinator-1.log")).unwrap_or_default();
        if let Some(addr) = log
            .split("REST API and dashboard at http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
        {
            return addr.to_string();
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits up to 60 s for `ok`.
fn wait_until(what: &str, cluster: &LocalCluster, mut ok: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ok() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "timed out: {what}\n{}",
            cluster.all_logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The coordinator's REST API, as Flink's job manager's: the workers as task managers
/// with their slots, a cluster job's subtasks with the worker each runs on and the
/// metrics the workers report, its checkpoints; a stop with a savepoint, and a cancel.
#[test]
fn the_coordinators_rest_api_shows_workers_and_subtasks_and_stops_jobs() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, tmp.path());
    let rest = rest_address(tmp.path());
    let overview = get_json(&rest, "/overview");
    assert_eq!(overview["taskmanagers"], 3, "{overview}");
    assert_eq!(overview["slots-total"], 3, "{overview}");
    assert_eq!(overview["slots-available"], 3, "{overview}");
    assert_eq!(overview["jobs-running"], 0, "{overview}");

    let (out, args) = windowed_job(tmp.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut job = cluster.submit(&args);
    let mut job_id = String::new();
    wait_until("the job runs", &cluster, || {
        let jobs = get_json(&rest, "/jobs/overview");
        match jobs["jobs"].as_array().map(Vec::as_slice) {
            Some([one]) if one["state"] == "RUNNING" => {
                job_id = one["jid"].as_str().unwrap().to_string();
                true
            }
            _ => false,
        }
    });
    // The keyed aggregate's three subtasks run on the three workers, and each one's
    // records reach the coordinator.
    let details = get_json(&rest, &format!("/jobs/{job_id}"));
    let vertices = details["vertices"].as_array().unwrap();
    assert_eq!(vertices.len(), 2, "{details}");
    let aggregate = format!("/jobs/{job_id}/vertices/1");
    wait_until("every subtask counts records", &cluster, || {
        let v = get_json(&rest, &aggregate);
        v["subtasks"].as_array().unwrap().iter().all(|t| {
            t["metrics"]["read-records"].as_u64().unwrap() > 0
                && t["metrics"]["write-records"].as_u64().unwrap() > 0
        })
    });
    let v = get_json(&rest, &aggregate);
    let mut hosts: Vec<String> = v["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["host"].as_str().unwrap().to_string())
        .collect();
    hosts.sort();
    let managers = get_json(&rest, "/taskmanagers");
    let managers = managers["taskmanagers"].as_array().unwrap();
    let mut paths: Vec<String> = managers
        .iter()
        .map(|m| m["path"].as_str().unwrap().to_string())
        .collect();
    paths.sort();
    assert_eq!(hosts, paths, "{v}");
    for m in managers {
        assert_eq!(m["slotsNumber"], 1, "{m}");
        assert_eq!(m["freeSlots"], 0, "{m}");
        let heard = m["timeSinceLastHeartbeat"].as_u64().unwrap();
        let now = v["now"].as_u64().unwrap();
        assert!(now.abs_diff(heard) < 5_000, "{m} at {now}");
    }
    let overview = get_json(&rest, "/overview");
    assert_eq!(overview["jobs-running"], 1, "{overview}");
    assert_eq!(overview["slots-available"], 0, "{overview}");
    // Flink's task metrics, per subtask, on the coordinator's Prometheus page.
    let (status, metrics) = http(&rest, "GET", "/metrics", None);
    assert_eq!(status, 200);
    assert!(
        metrics.contains("weir_task_numRecordsIn_total{")
            && metrics.contains("subtask_index=\"2\""),
        "{metrics}"
    );
    wait_until("a checkpoint completes", &cluster, || {
        let c = get_json(&rest, &format!("/jobs/{job_id}/checkpoints"));
        c["counts"]["completed"].as_u64().unwrap() > 0
    });

    // Stop with a savepoint through the REST API.
    let savepoints = tmp.path().join("savepoints");
    let (status, body) = http(
        &rest,
        "POST",
        &format!("/jobs/{job_id}/stop"),
        Some(&format!(
            "{{\"drain\": false, \"targetDirectory\": \"{}\"}}",
            savepoints.display()
        )),
    );
    assert_eq!(status, 202, "{body}");
    let request: serde_json::Value = serde_json::from_str(&body).unwrap();
    let request = request["request-id"].as_str().unwrap().to_string();
    let mut location = String::new();
    wait_until("the savepoint completes", &cluster, || {
        let op = get_json(&rest, &format!("/jobs/{job_id}/savepoints/{request}"));
        if op["status"]["id"] != "COMPLETED" {
            return false;
        }
        location = op["operation"]["location"]
            .as_str()
            .unwrap_or_else(|| panic!("{op}"))
            .to_string();
        true
    });
    assert!(job.wait().unwrap().success(), "{}", stderr_of(&mut job));
    assert!(
        std::path::Path::new(&location).join("_metadata").exists(),
        "{location}"
    );
    wait_until("the job is FINISHED", &cluster, || {
        get_json(&rest, &format!("/jobs/{job_id}"))["state"] == "FINISHED"
    });
    assert!(committed_lines(&out).len() < 3000);

    // Resumed from the savepoint, then cancelled: its parts on the workers end, and
    // their slots are free again.
    let mut resumed = args.clone();
    resumed.extend(["--restore", &location]);
    let mut job = cluster.submit(&resumed);
    let mut second = String::new();
    wait_until("the resumed job runs", &cluster, || {
        let jobs = get_json(&rest, "/jobs/overview");
        let running = jobs["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["state"] == "RUNNING" && j["jid"] != job_id.as_str())
            .map(|j| j["jid"].as_str().unwrap().to_string());
        running.map(|id| second = id).is_some()
    });
    let (status, body) = http(&rest, "PATCH", &format!("/jobs/{second}?mode=cancel"), None);
    assert_eq!(status, 202, "{body}");
    assert!(!job.wait().unwrap().success());
    wait_until("the job is CANCELED and its slots free", &cluster, || {
        let overview = get_json(&rest, "/overview");
        get_json(&rest, &format!("/jobs/{second}"))["state"] == "CANCELED"
            && overview["slots-available"] == 3
            && overview["jobs-cancelled"] == 1
            && overview["jobs-finished"] == 1
    });
}

/// `weir shell --cluster host:port`, as Flink's SQL client on a session cluster: the
/// session's statements and each streaming INSERT go to the coordinator as one job, SHOW
/// JOBS shows it with the coordinator's figures, and `-f` waits for it.
#[test]
fn the_shell_submits_streaming_inserts_to_the_cluster() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, tmp.path());
    let (out, _) = windowed_job(tmp.path());
    let job = std::fs::read_to_string(tmp.path().join("job.sql")).unwrap();
    let script = write_script(
        tmp.path(),
        "shell.sql",
        &format!(
            "SET 'parallelism.default' = '3';
             SET 'execution.checkpointing.dir' = '{}';
             SET 'execution.checkpointing.interval' = '200 ms';
             {job}
             SHOW JOBS;",
            tmp.path().join("chk").display()
        ),
    );
    let shell = weir()
        .args(["shell", "--cluster", &cluster.address, "-f"])
        .arg(&script)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&shell.stdout);
    assert!(
        shell.status.success(),
        "{stdout}\n{}\n{}",
        String::from_utf8_lossy(&shell.stderr),
        cluster.all_logs()
    );
    let id = stdout
        .split("Submitted job ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no job submitted: {stdout}"));
    assert!(
        stdout.contains(&format!("to the cluster at {}", cluster.address)),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches(id).count(),
        2,
        "SHOW JOBS lists the job: {stdout}"
    );
    assert!(
        cluster.all_logs().contains(id),
        "the coordinator does not name job {id}:\n{}",
        cluster.all_logs()
    );
    assert_windows_exactly_once(&out);
}

/// In an interactive shell on the cluster, a plain `STOP JOB` cancels the job there: its
/// tasks end on the workers and their slots are free again.
#[test]
fn the_shell_cancels_a_job_on_the_cluster() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, tmp.path());
    let rest = rest_address(tmp.path());
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.args(["shell", "--cluster", &cluster.address])
        .env("WEIR_HISTORY", tmp.path().join("history"))
        .env("WEIR_RUNTIME_DIR", tmp.path().join("run"))
        .env("TERM", "dumb");
    let mut s = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
    s.exp_string("Ctrl-D quits").unwrap();
    for statement in [
        "SET 'parallelism.default' = '3';".to_string(),
        format!(
            "SET 'execution.checkpointing.dir' = '{}';",
            tmp.path().join("chk").display()
        ),
        "CREATE TABLE src (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '100');"
            .to_string(),
        "CREATE TABLE sink (id BIGINT) WITH ('connector' = 'blackhole');".to_string(),
    ] {
        s.send_line(&statement).unwrap();
        s.exp_string("[INFO]").unwrap();
    }
    s.send_line("INSERT INTO sink SELECT id FROM src;").unwrap();
    let (_, id) = s.exp_regex("[0-9a-f]{32}").unwrap();
    wait_until("the job runs on every worker", &cluster, || {
        let overview = get_json(&rest, "/overview");
        overview["jobs-running"] == 1 && overview["slots-available"] == 0
    });
    s.send_line(&format!("STOP JOB '{id}';")).unwrap();
    s.exp_string("cancelled").unwrap();
    wait_until("the job is CANCELED and its slots free", &cluster, || {
        let overview = get_json(&rest, "/overview");
        get_json(&rest, &format!("/jobs/{id}"))["state"] == "CANCELED"
            && overview["slots-available"] == 3
    });
    let log = std::fs::read_to_string(tmp.path().join("coordinator-1.log")).unwrap();
    assert!(log.contains(&format!("cancelling job {id}")), "{log}");
    s.send_control('d').unwrap();
    s.exp_eof().unwrap();
}
