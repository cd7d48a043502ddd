//! `weir stop` against a running `weir run`, over the owner-only control socket.

use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

const JOB: &str = "
CREATE TABLE src (id BIGINT, k INT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '3000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '${end}',
  'fields.k.min' = '0', 'fields.k.max' = '9'
);
CREATE TABLE dst (id BIGINT, k INT) WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'csv');
INSERT INTO dst SELECT id, k FROM src;
";

/// Starts the job and waits until `weir list` shows it; returns the child and the job id.
/// The caller waits for the child.
#[allow(clippy::zombie_processes)]
fn start_job(dir: &Path, end: u64) -> (std::process::Child, String) {
    let out = dir.join("out");
    let s = write_script(
        dir,
        "job.sql",
        &render(
            JOB,
            &[("out", out.to_str().unwrap()), ("end", &end.to_string())],
        ),
    );
    let run_dir = dir.join("run");
    let child = weir()
        .env("WEIR_RUNTIME_DIR", &run_dir)
        .args([
            "run",
            "--quiet",
            s.to_str().unwrap(),
            "-p",
            "2",
            "--checkpoint-dir",
            dir.join("chk").to_str().unwrap(),
        ])
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        let listed = weir()
            .env("WEIR_RUNTIME_DIR", &run_dir)
            .arg("list")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&listed.stdout).to_string();
        if let Some(id) = text.split_whitespace().next() {
            let socket = run_dir.join(format!("{id}.sock"));
            let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "the control socket must be owner-only");
            let dir_mode = std::fs::metadata(&run_dir).unwrap().permissions().mode() & 0o777;
            assert_eq!(dir_mode, 0o700);
            return (child, id.to_string());
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "job never listed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn stop(dir: &Path, id: &str, drain: bool) -> String {
    let mut cmd = weir();
    cmd.env("WEIR_RUNTIME_DIR", dir.join("run")).args([
        "stop",
        &id[..8],
        "--savepoint-dir",
        dir.join("sp").to_str().unwrap(),
    ]);
    if drain {
        cmd.arg("--drain");
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "weir stop failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.trim()
        .strip_prefix("Savepoint completed. Path: ")
        .expect("savepoint path")
        .to_string()
}

#[test]
fn stop_with_drain_commits_everything_read_and_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, id) = start_job(tmp.path(), 1_000_000);
    std::thread::sleep(Duration::from_millis(700));
    let savepoint = stop(tmp.path(), &id, true);
    assert!(child.wait().unwrap().success());
    assert!(Path::new(&savepoint).join("_metadata").exists());
    // Each source split emitted a prefix of its rows (odd ids, even ids); all committed.
    let ids = committed_numbers(&tmp.path().join("out"));
    assert!(ids.len() > 500, "only {} rows", ids.len());
    for parity in [1, 0] {
        let class: Vec<i64> = ids.iter().copied().filter(|i| i % 2 == parity).collect();
        let expected: Vec<i64> = (0..class.len() as i64)
            .map(|n| 2 * n + 2 - parity)
            .collect();
        assert_eq!(
            class, expected,
            "rows lost or repeated before the drained savepoint"
        );
    }
}

#[test]
fn stop_without_drain_then_resume_from_the_savepoint() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, id) = start_job(tmp.path(), 6000);
    std::thread::sleep(Duration::from_millis(600));
    let savepoint = stop(tmp.path(), &id, false);
    assert!(child.wait().unwrap().success());
    let before = committed_numbers(&tmp.path().join("out")).len();
    assert!(before > 0 && before < 6000, "stopped after {before} rows");
    let out = tmp.path().join("out");
    let s = write_script(
        tmp.path(),
        "job.sql",
        &render(JOB, &[("out", out.to_str().unwrap()), ("end", "6000")]),
    );
    run_ok(&[s.to_str().unwrap(), "-p", "3", "--restore", &savepoint]);
    assert_eq!(
        committed_numbers(&out),
        (1..=6000).collect::<Vec<_>>(),
        "resume lost or repeated rows"
    );
}
