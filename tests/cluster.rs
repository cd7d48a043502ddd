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
}

impl LocalCluster {
    fn start(workers: usize, logs: &Path) -> LocalCluster {
        let address = format!("127.0.0.1:{}", free_port());
        let coordinator = weir()
            .args(["coordinator", "--listen", &address, "--heartbeat-timeout", "3 s"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(logs.join("coordinator.log")).unwrap())
            .spawn()
            .unwrap();
        let mut cluster = LocalCluster {
            address,
            coordinator,
            workers: Vec::new(),
            logs: logs.to_path_buf(),
            started: 0,
        };
        for _ in 0..workers {
            let w = cluster.start_worker();
            cluster.workers.push(w);
        }
        cluster
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
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sql");
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.strip_suffix(".sql").map(str::to_string)
        })
        .collect();
    names.sort();
    assert!(names.len() >= 20, "{names:?}");
    for name in &names {
        let template = std::fs::read_to_string(root.join(format!("{name}.sql"))).unwrap();
        let expected: Vec<String> =
            std::fs::read_to_string(root.join(format!("{name}.expected")))
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect();
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out");
        let script = write_script(
            &dir,
            "job.sql",
            &render(&template, &[("out", out.to_str().unwrap())]),
        );
        let chk = dir.join("chk");
        cluster.run_ok(&[
            script.to_str().unwrap(),
            "-p",
            "2",
            "--checkpoint-dir",
            chk.to_str().unwrap(),
            "--checkpoint-interval",
            "100 ms",
        ]);
        let got = materialize(committed_lines(&out));
        let missing: Vec<_> = expected.iter().filter(|l| !got.contains(l)).take(5).collect();
        let extra: Vec<_> = got.iter().filter(|l| !expected.contains(l)).take(5).collect();
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

/// 30 000 rows through a keyed TUMBLE aggregate (a hash exchange between the workers) at
/// parallelism 3; a worker is SIGKILLed ten times at random moments and a new one
/// started each time. The job restarts from its latest checkpoint on the workers there
/// are, and every window is committed exactly once with its exact count and sum.
#[test]
fn killed_workers_lose_and_duplicate_no_committed_row() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(3, tmp.path());
    let out = tmp.path().join("out");
    let chk = tmp.path().join("chk");
    let script = write_script(
        tmp.path(),
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
    let mut job = cluster.submit(&[
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
    ]);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut kills = 0;
    let started = Instant::now();
    while kills < 10 {
        std::thread::sleep(Duration::from_millis(400 + next(800)));
        if job.try_wait().unwrap().is_some() {
            break;
        }
        let victim = next(cluster.workers.len() as u64) as usize;
        let mut w = cluster.workers.remove(victim);
        w.kill().unwrap();
        w.wait().unwrap();
        kills += 1;
        let replacement = cluster.start_worker();
        cluster.workers.push(replacement);
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "the job does not progress:\n{}",
            cluster.all_logs()
        );
    }
    let deadline = Instant::now() + Duration::from_secs(240);
    let status = loop {
        if let Some(status) = job.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the job did not finish after {kills} kills:\n{}",
            cluster.all_logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = stderr_of(&mut job);
    assert!(status.success(), "the job failed: {err}\n{}", cluster.all_logs());
    assert!(
        kills >= 10,
        "the job finished after only {kills} kills; slow its source down"
    );
    assert!(err.contains("restarts after failures"), "{err}");

    // Window w (of 100 rows: seq 100w .. 100w+99) holds 10 rows of each k = seq % 10.
    let mut seen = std::collections::BTreeMap::new();
    for line in committed_lines(&out) {
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let key = (v["k"].as_i64().unwrap(), v["window_start"].as_str().unwrap().to_string());
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
