//! Batch mode on a Ballista cluster on this machine: one `weir ballista-scheduler` and
//! `weir ballista-executor` processes on 127.0.0.1; jobs run with
//! `weir run --mode batch --cluster df://…`. The golden and Nexmark queries give the rows
//! of one process, the executors do the work, and a killed executor neither loses nor
//! duplicates a committed row.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A scheduler and its executors, killed when dropped. Each one's stderr goes to a file
/// under `root`, shown when a test fails.
struct Ballista {
    address: String,
    scheduler: Child,
    executors: Vec<Child>,
    root: PathBuf,
    started: usize,
    slots: usize,
}

fn wait_for_port(port: u16, what: &str) {
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what} does not listen on port {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Files under `dir`, in all its subfolders.
fn files_under(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| match e.path().is_dir() {
                true => files_under(&e.path()),
                false => 1,
            })
            .sum()
    })
}

impl Ballista {
    /// A scheduler that loses a silent executor after `executor_timeout`, and `executors`
    /// executors of `slots` slots each.
    fn start(executors: usize, slots: usize, root: &Path, executor_timeout: &str) -> Ballista {
        let port = free_port();
        let address = format!("127.0.0.1:{port}");
        let scheduler = weir()
            .args(["ballista-scheduler", "--listen", &address])
            .args(["--executor-timeout", executor_timeout])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(root.join("scheduler.log")).unwrap())
            .spawn()
            .unwrap();
        wait_for_port(port, "the Ballista scheduler");
        let mut cluster = Ballista {
            address,
            scheduler,
            executors: Vec::new(),
            root: root.to_path_buf(),
            started: 0,
            slots,
        };
        for _ in 0..executors {
            let e = cluster.start_executor();
            cluster.executors.push(e);
        }
        cluster
    }

    fn url(&self) -> String {
        format!("df://{}", self.address)
    }

    /// Starts an executor (work folder `executor-N` under the root) and waits until it
    /// listens.
    fn start_executor(&mut self) -> Child {
        self.started += 1;
        let n = self.started;
        let (flight, grpc) = (free_port(), free_port());
        let work = self.work_dir(n);
        std::fs::create_dir_all(&work).unwrap();
        let child = weir()
            .args(["ballista-executor", "--scheduler", &self.address])
            .args(["--flight-port", &flight.to_string()])
            .args(["--grpc-port", &grpc.to_string()])
            .args(["--slots", &self.slots.to_string()])
            .args(["--heartbeat-interval", "1 s"])
            .args(["--work-dir", work.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.root.join(format!("executor-{n}.log"))).unwrap())
            .spawn()
            .unwrap();
        wait_for_port(flight, "a Ballista executor");
        child
    }

    fn work_dir(&self, n: usize) -> PathBuf {
        self.root.join(format!("executor-{n}"))
    }

    /// How many shuffle files executor `n` wrote.
    fn shuffle_files(&self, n: usize) -> usize {
        files_under(&self.work_dir(n))
    }

    /// The processes' logs, for a failure message.
    fn logs(&self) -> String {
        let mut text = String::new();
        for entry in std::fs::read_dir(&self.root).unwrap().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "log") {
                let log = std::fs::read_to_string(&path).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                text += &format!("--- {}\n", path.display());
                for line in tail.iter().rev() {
                    text += line;
                    text += "\n";
                }
            }
        }
        text
    }
}

impl Drop for Ballista {
    fn drop(&mut self) {
        for child in self.executors.iter_mut().chain([&mut self.scheduler]) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `script` in batch mode on `cluster` (with `extra` arguments); its output on
/// failure names the cluster's logs.
fn run_on(cluster: &Ballista, script: &Path, extra: &[&str]) {
    let url = cluster.url();
    let mut args = vec![
        script.to_str().unwrap(),
        "--mode",
        "batch",
        "--cluster",
        &url,
    ];
    args.extend_from_slice(extra);
    let out = run(&args);
    assert!(
        out.status.success(),
        "{} failed on Ballista:\n{}\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr),
        cluster.logs()
    );
}

/// Every golden script that batch mode runs, on executors of one slot each: at -p 4 a
/// stage of a scan has four tasks, two on each executor, and each must read only its
/// share of the scan (when each read all of it, every count came back doubled).
#[test]
fn golden_queries_on_ballista_give_the_golden_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Ballista::start(2, 1, tmp.path(), "180 s");
    let names = golden_names();
    let mut ran = 0;
    for name in &names {
        let (template, expected) = golden(name);
        // What batch mode does not run in one process, and MATCH_RECOGNIZE (refused on
        // Ballista, below).
        if template.contains("-- batch: skip") || name == "match_recognize" {
            continue;
        }
        let dir = tmp.path().join(name);
        let out = dir.join("out");
        std::fs::create_dir_all(&dir).unwrap();
        let script = write_script(
            &dir,
            "job.sql",
            &render(&template, &[("out", out.to_str().unwrap())]),
        );
        let before = cluster.shuffle_files(1) + cluster.shuffle_files(2);
        run_on(&cluster, &script, &["-p", "4"]);
        assert!(
            cluster.shuffle_files(1) + cluster.shuffle_files(2) > before,
            "{name}: the executors wrote no shuffle file"
        );
        assert_eq!(
            materialize(committed_lines(&out)),
            expected,
            "{name}: the Ballista run differs from the golden file"
        );
        ran += 1;
    }
    assert!(ran >= 20, "only {ran} golden scripts ran");
    // The executors did the work: each wrote shuffle files for some stages.
    for n in 1..=2 {
        assert!(
            cluster.shuffle_files(n) > 0,
            "executor {n} ran no task:\n{}",
            cluster.logs()
        );
    }
}

/// Nexmark's queries on generated events, in batch mode in one process and on Ballista
/// (executors of one slot, as above).
#[test]
fn nexmark_queries_on_ballista_agree_with_one_process() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Ballista::start(2, 1, tmp.path(), "180 s");
    let ddl = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql-examples/nexmark/ddl.sql");
    for q in [
        "q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q9", "q15", "q17", "q18",
    ] {
        let vars = crate::nexmark::nexmark_vars(20_000);
        let mut rows = Vec::new();
        for on_cluster in [false, true] {
            let dir = tmp.path().join(format!("{q}-{on_cluster}"));
            std::fs::create_dir_all(&dir).unwrap();
            let out = dir.join("out");
            let script = write_script(
                &dir,
                "q.sql",
                &crate::nexmark::query_with_file_sink(q, &out),
            );
            let mut args = vec![ddl.to_str().unwrap(), script.to_str().unwrap()];
            args.extend(vars.iter().map(String::as_str));
            args.extend_from_slice(&["--mode", "batch", "-p", "4"]);
            let url = cluster.url();
            if on_cluster {
                args.extend_from_slice(&["--cluster", &url]);
            }
            let result = run(&args);
            assert!(
                result.status.success(),
                "{q} (cluster: {on_cluster}) failed:\n{}\n{}",
                String::from_utf8_lossy(&result.stderr),
                cluster.logs()
            );
            rows.push(materialize(committed_lines(&out)));
        }
        assert!(!rows[0].is_empty(), "{q}: no output");
        assert!(
            rows[0] == rows[1],
            "{q}: one process and Ballista differ ({} vs {} rows; first difference: {:?})",
            rows[0].len(),
            rows[1].len(),
            rows[0].iter().zip(&rows[1]).find(|(a, b)| a != b)
        );
    }
}

/// Ids `1..=ids`, generated at `per_second`, counted and summed by `id % keys` into a
/// JSON file table at `out`: each key's count and sum are known (see [`check_counts`]).
fn counting_job_of(out: &Path, ids: i64, per_second: i64, keys: i64) -> String {
    format!(
        "CREATE TABLE src (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '{per_second}', \
           'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '{ids}');
         CREATE TABLE sink (k BIGINT, n BIGINT, total BIGINT) WITH ('connector' = 'filesystem', \
           'path' = '{}', 'format' = 'json');
         INSERT INTO sink SELECT id % {keys}, COUNT(*), SUM(id) FROM src GROUP BY id % {keys};",
        out.display()
    )
}

/// An aggregate of 4M generated rows into 1,000 keys, made in about 8 s.
fn counting_job(out: &Path) -> String {
    counting_job_of(out, 4_000_000, 500_000, 1000)
}

/// 100,000 generated rows into 10 keys, made at once.
fn small_counting_job(out: &Path) -> String {
    counting_job_of(out, 100_000, 1_000_000, 10)
}

/// Checks the output of [`counting_job_of`]: every key once, with its exact count and sum.
fn check_counts(out: &Path, ids: i64, keys: i64) {
    let lines = committed_lines(out);
    assert_eq!(
        lines.len() as i64,
        keys,
        "{} keys committed, not {keys}",
        lines.len()
    );
    let mut seen = std::collections::BTreeSet::new();
    let n = ids / keys;
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let k = v["k"].as_i64().unwrap();
        assert!(seen.insert(k), "key {k} committed twice");
        // ids k, k + keys, …: n of them (key 0: keys, 2 keys, …, ids).
        let first = if k == 0 { keys } else { k };
        assert_eq!(v["n"].as_i64().unwrap(), n, "key {k}: count");
        assert_eq!(
            v["total"].as_i64().unwrap(),
            n * first + keys * (n - 1) * n / 2,
            "key {k}: sum"
        );
    }
}

/// The only executor SIGKILLed while it runs the job's tasks: the scheduler loses it by
/// its heartbeats and runs its tasks again on the one started to replace it; the job
/// commits every key once with its exact count and sum.
#[test]
fn a_killed_executor_loses_and_duplicates_no_committed_row() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = Ballista::start(1, 2, tmp.path(), "5 s");
    let out = tmp.path().join("out");
    let script = write_script(tmp.path(), "count.sql", &counting_job(&out));
    let url = cluster.url();
    let mut job = spawn(
        &[
            script.to_str().unwrap(),
            "--mode",
            "batch",
            "-p",
            "4",
            "--cluster",
            &url,
        ],
        &[],
    );
    // Kill the only executor 3 s into the first stage (about 8 s long), while it runs two
    // of its four tasks: they can only end on the replacement.
    std::thread::sleep(Duration::from_secs(3));
    if let Some(status) = job.try_wait().unwrap() {
        panic!(
            "the job ended first ({status}):\n{}\n{}",
            stderr_of(&mut job),
            cluster.logs()
        );
    }
    cluster.executors[0].kill().unwrap();
    cluster.executors[0].wait().unwrap();
    assert!(
        committed_lines(&out).is_empty(),
        "rows visible before the job ended"
    );
    let replacement = cluster.start_executor();
    cluster.executors.push(replacement);
    let status = job.wait().unwrap();
    assert!(
        status.success(),
        "the job failed after an executor was killed:\n{}\n{}",
        stderr_of(&mut job),
        cluster.logs()
    );
    check_counts(&out, 4_000_000, 1000);
}

#[test]
fn ballista_misuse_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let script = write_script(tmp.path(), "count.sql", &counting_job(&out));
    let s = script.to_str().unwrap();

    // No scheduler at the address.
    let nobody = format!("df://127.0.0.1:{}", free_port());
    let failed = run(&[s, "--mode", "batch", "--cluster", &nobody]);
    let text = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success());
    assert!(
        text.contains("no Ballista scheduler answers at") && text.contains(&nobody),
        "{text}"
    );

    // A cluster without executors: the job fails after slot.request.timeout, as Flink's
    // does when it gets no slot, instead of waiting for ever.
    std::fs::create_dir_all(tmp.path().join("empty")).unwrap();
    let empty = Ballista::start(0, 1, &tmp.path().join("empty"), "180 s");
    let failed = run(&[
        s,
        "--mode",
        "batch",
        "--cluster",
        &empty.url(),
        "-D",
        "slot.request.timeout=2 s",
    ]);
    let text = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success());
    assert!(
        text.contains("has no executor") && text.contains("slot.request.timeout"),
        "{text}"
    );
    drop(empty);

    let cluster = Ballista::start(1, 1, tmp.path(), "180 s");
    let url = cluster.url();
    // A streaming job.
    let copy = write_script(
        tmp.path(),
        "copy.sql",
        &counting_job(&out).replace(
            "SELECT id % 1000, COUNT(*), SUM(id) FROM src GROUP BY id % 1000",
            "SELECT id, id + 1, id * 2 FROM src",
        ),
    );
    let failed = run(&[copy.to_str().unwrap(), "--cluster", &url]);
    let text = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success());
    assert!(text.contains("runs batch jobs only"), "{text}");

    // MATCH_RECOGNIZE has no codec yet.
    let (template, _) = golden("match_recognize");
    let script = write_script(
        tmp.path(),
        "match.sql",
        &render(&template, &[("out", out.to_str().unwrap())]),
    );
    let failed = run(&[
        script.to_str().unwrap(),
        "--mode",
        "batch",
        "--cluster",
        &url,
    ]);
    let text = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success());
    assert!(
        text.contains("MATCH_RECOGNIZE does not run on a Ballista cluster"),
        "{text}"
    );
    assert!(committed_lines(&out).is_empty(), "a refused job wrote rows");
}

/// The shell (`weir shell --cluster df://…`) and the library (`Engine::set_batch_cluster`)
/// run batch queries on Ballista too; the shell refuses a streaming job there, and names
/// an address where no coordinator answers.
#[test]
fn shell_and_library_run_batch_queries_on_ballista() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Ballista::start(1, 2, tmp.path(), "180 s");
    let url = cluster.url();

    let out = tmp.path().join("shell");
    let script = write_script(tmp.path(), "shell.sql", &small_counting_job(&out));
    let before = cluster.shuffle_files(1);
    let shell = weir()
        .args(["shell", "--cluster", &url, "-f", script.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        shell.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&shell.stderr),
        cluster.logs()
    );
    assert!(
        cluster.shuffle_files(1) > before,
        "the shell's query ran elsewhere"
    );
    check_counts(&out, 100_000, 10);

    let streaming = write_script(
        tmp.path(),
        "streaming.sql",
        &format!(
            "SET 'execution.runtime-mode' = 'streaming';\n{}",
            small_counting_job(&tmp.path().join("streaming")).replace(
                "SELECT id % 10, COUNT(*), SUM(id) FROM src GROUP BY id % 10",
                "SELECT id, id, id FROM src"
            )
        ),
    );
    for (address, needle) in [
        (url.as_str(), "runs batch jobs only"),
        ("127.0.0.1:1", "no Weir coordinator answers at 127.0.0.1:1"),
    ] {
        let refused = weir()
            .args([
                "shell",
                "--cluster",
                address,
                "-f",
                streaming.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{address}: {text}");
        assert!(text.contains(needle), "{address}: {text}");
    }
    assert!(committed_lines(&tmp.path().join("streaming")).is_empty());

    let out = tmp.path().join("library");
    let before = cluster.shuffle_files(1);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut engine = weir::Engine::default();
        let timeout = engine.config().slot_request_timeout();
        engine.set_batch_cluster(weir::ballista::client_session(&url, timeout).unwrap());
        engine
            .config_mut()
            .set("execution.runtime-mode", "batch")
            .unwrap();
        let mut queries = 0;
        for stmt in engine.parse(&small_counting_job(&out)).unwrap() {
            if let weir::Outcome::Batch(batch) = engine.execute(&stmt).await.unwrap() {
                for query in &batch {
                    engine.run_batch(query).await.unwrap();
                    queries += 1;
                }
            }
        }
        assert_eq!(queries, 1);
    });
    assert!(
        cluster.shuffle_files(1) > before,
        "the library's query ran elsewhere"
    );
    check_counts(&out, 100_000, 10);
}

/// `plus_ten(x)`: a function of the test's own.
fn plus_ten() -> weir::datafusion::logical_expr::ScalarUDF {
    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::{DataType, Int64Type};
    use weir::datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
    create_udf(
        "plus_ten",
        vec![DataType::Int64],
        DataType::Int64,
        Volatility::Immutable,
        std::sync::Arc::new(|args: &[ColumnarValue]| {
            let a = args[0].clone().into_array(1)?;
            let out: Int64Array = a
                .as_primitive::<Int64Type>()
                .iter()
                .map(|v| v.map(|v| v + 10))
                .collect();
            Ok(ColumnarValue::Array(std::sync::Arc::new(out)))
        }),
    )
}

/// Runs `INSERT INTO out SELECT plus_ten(id) …` through the library on the Ballista
/// scheduler at `url`.
async fn run_plus_ten(url: &str, out: &Path) -> weir::common::Result<()> {
    let mut engine = weir::Engine::default();
    engine.register_udf(plus_ten());
    let timeout = engine.config().slot_request_timeout();
    engine.set_batch_cluster(weir::ballista::client_session(url, timeout)?);
    engine.config_mut().set("execution.runtime-mode", "batch")?;
    engine.config_mut().set("parallelism.default", "2")?;
    let script = format!(
        "CREATE TABLE src (id BIGINT) WITH ('connector' = 'datagen',
           'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '1000');
         CREATE TABLE out (v BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}',
           'format' = 'csv');
         INSERT INTO out SELECT plus_ten(id) FROM src;",
        out.display()
    );
    for stmt in engine.parse(&script)? {
        if let weir::Outcome::Batch(batch) = engine.execute(&stmt).await? {
            for query in &batch {
                engine.run_batch(query).await?;
            }
        }
    }
    Ok(())
}

/// A function the program registers (`Engine::register_udf`) runs on a Ballista cluster
/// whose scheduler and executor the program runs itself with the same function
/// (`weir::ballista::register_udf`): here in the test's own process, serving on their
/// own ports. Stock `weir ballista-*` processes name the function as unknown, and the
/// query commits nothing.
#[test]
fn a_programs_own_functions_run_on_the_ballista_cluster_it_runs() {
    use weir::ballista::process::{ExecutorOptions, SchedulerOptions, run_executor, run_scheduler};
    let tmp = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    weir::ballista::register_udf(plus_ten());
    let (scheduler, flight, tasks) = (free_port(), free_port(), free_port());
    runtime.spawn(run_scheduler(SchedulerOptions {
        listen: format!("127.0.0.1:{scheduler}").parse().unwrap(),
        external_host: None,
        executor_timeout_secs: 180,
        expire_interval_secs: 15,
    }));
    wait_for_port(scheduler, "the program's scheduler");
    runtime.spawn(run_executor(ExecutorOptions {
        scheduler: ("127.0.0.1".into(), scheduler),
        bind_host: "127.0.0.1".into(),
        external_host: None,
        flight_port: flight,
        grpc_port: tasks,
        slots: 1,
        work_dir: Some(tmp.path().join("work").to_str().unwrap().to_string()),
        heartbeat_interval_secs: 10,
    }));
    wait_for_port(tasks, "the program's executor");
    let out = tmp.path().join("own");
    let url = format!("df://127.0.0.1:{scheduler}");
    runtime.block_on(run_plus_ten(&url, &out)).unwrap();
    assert_eq!(committed_numbers(&out), (11..=1010).collect::<Vec<i64>>());
    assert!(
        files_under(&tmp.path().join("work")) > 0,
        "the query ran elsewhere than on the program's executor"
    );

    std::fs::create_dir_all(tmp.path().join("stock")).unwrap();
    let stock = Ballista::start(1, 1, &tmp.path().join("stock"), "180 s");
    let out = tmp.path().join("stock-out");
    let failed = runtime
        .block_on(run_plus_ten(&stock.url(), &out))
        .unwrap_err();
    assert!(
        failed
            .to_string()
            .contains("'plus_ten' is not known to this Ballista process"),
        "{failed}"
    );
    assert!(committed_lines(&out).is_empty());
}
