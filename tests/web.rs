//! The REST API, the Prometheus endpoint and the dashboard of a real running job, over
//! real HTTP (and a real browser for the dashboard).

use crate::common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

/// A streaming job with two vertices (a source chain and a keyed aggregate into a
/// blackhole), its REST and Prometheus addresses, and its stderr lines so far.
struct LiveJob {
    child: std::process::Child,
    rest: String,
    prometheus: String,
    _tmp: tempfile::TempDir,
    savepoints: std::path::PathBuf,
}

fn live_job() -> LiveJob {
    let tmp = tempfile::tempdir().unwrap();
    let sql = "CREATE TABLE src (id BIGINT, k INT) WITH ('connector' = 'datagen', \
               'rows-per-second' = '2000', 'fields.k.min' = '0', 'fields.k.max' = '9');\n\
               CREATE TABLE dst (k INT, n BIGINT) WITH ('connector' = 'blackhole');\n\
               INSERT INTO dst SELECT k, COUNT(*) FROM src GROUP BY k;\n";
    let s = write_script(tmp.path(), "job.sql", sql);
    let savepoints = tmp.path().join("sp");
    let mut child = weir()
        .args(["run", "--quiet", s.to_str().unwrap(), "-p", "2"])
        .args(["--checkpoint-interval", "300 ms"])
        .args(["-D", "rest.port=0", "-D", "metrics.reporter.prom.port=0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (mut rest, mut prometheus) = (None, None);
    while rest.is_none() || prometheus.is_none() {
        let line = lines.next().expect("weir printed its addresses").unwrap();
        let addr = |l: &str| {
            l.split("http://")
                .nth(1)
                .map(|a| a.split('/').next().unwrap().to_string())
        };
        if line.contains("REST API and dashboard at") {
            rest = addr(&line);
        } else if line.contains("Prometheus metrics at") {
            prometheus = addr(&line);
        }
    }
    // Keep draining stderr so the job never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    LiveJob {
        child,
        rest: rest.unwrap(),
        prometheus: prometheus.unwrap(),
        _tmp: tmp,
        savepoints,
    }
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < Duration::from_secs(30), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn rest_api_and_prometheus_report_and_stop_a_running_job() {
    let mut job = live_job();
    let addr = job.rest.clone();
    let jobs = get_json(&addr, "/jobs");
    let id = jobs["jobs"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(jobs["jobs"][0]["status"], "RUNNING");

    // The graph: a source chain hashing into the aggregate, parallelism 2 each.
    let details = get_json(&addr, &format!("/jobs/{id}"));
    let nodes = details["plan"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{details}");
    assert_eq!(nodes[1]["inputs"][0]["ship_strategy"], "HASH[0]");
    assert!(nodes.iter().all(|n| n["parallelism"] == 2));
    let first = details["rows-in"].as_u64().unwrap();
    wait_for("rows in to grow and a checkpoint to complete", || {
        let d = get_json(&addr, &format!("/jobs/{id}"));
        let c = get_json(&addr, &format!("/jobs/{id}/checkpoints"));
        d["rows-in"].as_u64().unwrap() > first && c["counts"]["completed"].as_u64().unwrap() > 0
    });
    let checkpoints = get_json(&addr, &format!("/jobs/{id}/checkpoints"));
    assert_eq!(checkpoints["latest"]["completed"]["status"], "COMPLETED");
    assert!(
        checkpoints["latest"]["completed"]["state_size"]
            .as_u64()
            .unwrap()
            > 0
    );

    // Per subtask: rates and back-pressure from the samples.
    wait_for("the aggregate to report rows per second", || {
        let v = get_json(&addr, &format!("/jobs/{id}/vertices/1"));
        v["subtasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["records-in-per-second"].as_f64().unwrap() > 0.0)
    });
    let bp = get_json(&addr, &format!("/jobs/{id}/vertices/1/backpressure"));
    assert_eq!(bp["status"], "ok");
    assert_eq!(bp["subtasks"].as_array().unwrap().len(), 2);
    let (status, body) = http(&addr, "GET", &format!("/jobs/{id}/vertices/7"), None);
    assert_eq!(status, 404);
    assert!(body.contains("Vertex 7 not found"), "{body}");
    let (status, _) = http(&addr, "GET", "/jobs/0123/checkpoints", None);
    assert_eq!(status, 404);

    // Prometheus: Flink's metric names, one row per subtask.
    let (status, text) = http(&job.prometheus, "GET", "/metrics", None);
    assert_eq!(status, 200);
    for needle in [
        "weir_task_numRecordsIn_total{",
        "weir_task_busyTimeMsPerSecond{",
        "weir_task_backPressuredTimeMsPerSecond{",
        "weir_job_numberOfCompletedCheckpoints_total{",
        "weir_job_numRestarts_total{",
        &format!("job_id=\"{id}\""),
        "subtask_index=\"1\"",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }

    // Stop with a savepoint (drained), as Flink's POST /jobs/{id}/stop.
    let (status, body) = http(
        &addr,
        "POST",
        &format!("/jobs/{id}/stop"),
        Some(&format!(
            "{{\"drain\": true, \"targetDirectory\": \"{}\"}}",
            job.savepoints.display()
        )),
    );
    assert_eq!(status, 202, "{body}");
    let request: Value = serde_json::from_str(&body).unwrap();
    let rid = request["request-id"].as_str().unwrap().to_string();
    // `weir run` ends with its drained job, and its server with it: the status is
    // polled while it answers, and the savepoint is then looked for on disk.
    let mut location = None;
    wait_for("the savepoint", || {
        if std::net::TcpStream::connect(&addr).is_err() {
            return true;
        }
        let s = get_json(&addr, &format!("/jobs/{id}/savepoints/{rid}"));
        if s["status"]["id"] == "COMPLETED" {
            let l = s["operation"]["location"]
                .as_str()
                .unwrap_or("")
                .to_string();
            assert!(!l.is_empty(), "savepoint failed: {s}");
            location = Some(l);
            true
        } else {
            false
        }
    });
    let status = job.child.wait().unwrap();
    assert!(status.success(), "the stopped job exits cleanly");
    let written: Vec<_> = std::fs::read_dir(&job.savepoints)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("_metadata").exists())
        .collect();
    assert_eq!(
        written.len(),
        1,
        "one savepoint in {}",
        job.savepoints.display()
    );
    if let Some(l) = location {
        assert!(
            l.ends_with(written[0].file_name().unwrap().to_str().unwrap()),
            "{l}"
        );
    }
}

/// The dashboard in headless Chromium: the operator graph, numbers that move, the
/// checkpoint history; a screenshot is kept (docs/dashboard.png comes from this test).
#[test]
fn dashboard_renders_the_graph_and_live_numbers_in_a_browser() {
    let have_browser = std::path::Path::new("/usr/bin/chromium").exists()
        && std::process::Command::new("python3")
            .args(["-c", "import playwright"])
            .status()
            .is_ok_and(|s| s.success());
    if !have_browser {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install chromium and playwright"
        );
        eprintln!("SKIPPED: no /usr/bin/chromium or Python playwright");
        return;
    }
    let mut job = live_job();
    let shot = std::env::var("WEIR_DASHBOARD_SCREENSHOT").unwrap_or_else(|_| {
        std::env::temp_dir()
            .join(format!("weir-dashboard-{}.png", std::process::id()))
            .display()
            .to_string()
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dashboard/check.py");
    let out = std::process::Command::new("python3")
        .args([script, &format!("http://{}/", job.rest), "2", &shot])
        .output()
        .unwrap();
    let _ = job.child.kill();
    let _ = job.child.wait();
    assert!(
        out.status.success(),
        "dashboard check failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
