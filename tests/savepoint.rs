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
    start_listed(dir, &s, std::process::Stdio::inherit())
}

/// Starts `weir run script -p 2` with its control socket under `dir/run` and checkpoints
/// in `dir/chk`, and waits until `weir list` shows it; returns the child and the job id.
#[allow(clippy::zombie_processes)]
fn start_listed(
    dir: &Path,
    script: &Path,
    stdout: std::process::Stdio,
) -> (std::process::Child, String) {
    let run_dir = dir.join("run");
    let child = weir()
        .env("WEIR_RUNTIME_DIR", &run_dir)
        .args(["run", "--quiet"])
        .arg(script)
        .args(["-p", "2", "--checkpoint-dir"])
        .arg(dir.join("chk"))
        .stdout(stdout)
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

#[test]
fn stop_with_an_empty_or_ambiguous_job_id_is_refused_and_lists_the_jobs() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, id) = start_job(tmp.path(), 1_000_000);
    let run_dir = tmp.path().join("run");
    let stop_with = |prefix: &str| {
        weir()
            .env("WEIR_RUNTIME_DIR", &run_dir)
            .args(["stop", prefix, "--savepoint-dir"])
            .arg(tmp.path().join("sp"))
            .output()
            .unwrap()
    };
    let out = stop_with("");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "`weir stop ''` stopped a job");
    assert!(
        err.contains("no job id given") && err.contains(&id),
        "the error must say what is wrong and list the running jobs: {err}"
    );
    // A second job whose id shares the first 8 characters (its socket is enough: the
    // prefix is matched against socket names before anything is sent).
    let twin = format!("{}ffffffff", &id[..8]);
    std::fs::write(run_dir.join(format!("{twin}.sock")), b"").unwrap();
    let out = stop_with(&id[..8]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an ambiguous prefix stopped a job");
    assert!(
        err.contains("matches 2 jobs") && err.contains(&id) && err.contains(&twin),
        "the error must list the candidates: {err}"
    );
    std::fs::remove_file(run_dir.join(format!("{twin}.sock"))).unwrap();
    assert!(
        child.try_wait().unwrap().is_none(),
        "a refused stop ended the job"
    );
    // The whole id still works, and is never ambiguous.
    let savepoint = stop(tmp.path(), &id, true);
    assert!(child.wait().unwrap().success());
    assert!(Path::new(&savepoint).join("_metadata").exists());
}

/// The control folder decides who can stop a job: a folder that is a symbolic link, is
/// open to others or belongs to another user is refused before the job starts (and is
/// left as it was), by `weir run` and by `weir list`/`weir stop` alike. Without
/// `WEIR_RUNTIME_DIR`, `XDG_RUNTIME_DIR` or `USER` the folder is per user id.
#[test]
fn control_folder_that_is_a_symlink_open_or_foreign_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let script = write_script(
        tmp.path(),
        "job.sql",
        &render(JOB, &[("out", out.to_str().unwrap()), ("end", "2000")]),
    );
    let run_in = |run_dir: &Path| {
        weir()
            .env("WEIR_RUNTIME_DIR", run_dir)
            .args(["run", "--quiet"])
            .arg(&script)
            .output()
            .unwrap()
    };
    let list_in = |run_dir: &Path| {
        weir()
            .env("WEIR_RUNTIME_DIR", run_dir)
            .arg("list")
            .output()
            .unwrap()
    };
    let refused = |out: std::process::Output, why: &str| {
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            !out.status.success(),
            "accepted a control folder that {why}"
        );
        assert!(
            err.contains("refusing the control folder") && err.contains(why),
            "the error must say why ({why}): {err}"
        );
    };

    // A symbolic link to someone's folder: refused, and the target's mode is untouched.
    let target = tmp.path().join("target");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    refused(run_in(&link), "symbolic link");
    refused(list_in(&link), "symbolic link");
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o755, "the job changed the mode of the link's target");

    // A folder others can enter.
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    refused(run_in(&open), "mode is 777");
    refused(list_in(&open), "mode is 777");

    // A folder of another user (only root can make one here).
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap_or(1)
        == 0;
    if root {
        let foreign = tmp.path().join("foreign");
        std::fs::create_dir(&foreign).unwrap();
        std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
        refused(run_in(&foreign), "belongs to user id 65534");
        refused(list_in(&foreign), "belongs to user id 65534");
    }
    assert!(
        committed_lines(&out).is_empty(),
        "a refused run wrote output"
    );

    // No WEIR_RUNTIME_DIR, XDG_RUNTIME_DIR or USER: a per-uid folder under TMPDIR,
    // created owner-only.
    let tmpdir = tmp.path().join("tmp");
    std::fs::create_dir(&tmpdir).unwrap();
    let out = weir()
        .env_remove("WEIR_RUNTIME_DIR")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("USER")
        .env("TMPDIR", &tmpdir)
        .args(["run", "--quiet"])
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let folders: Vec<String> = std::fs::read_dir(&tmpdir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let uid = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap();
    assert_eq!(folders, vec![format!("weir-{uid}")]);
    let mode = std::fs::metadata(tmpdir.join(&folders[0]))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700);
}

/// The savepoint kept in `tests/data/savepoint-v4`: taken by `weir stop` (no drain) from
/// `job.sql` at parallelism 2 part-way through its input, with `before.txt` holding what
/// the job printed until then. Written by [`write_the_compat_savepoint`].
const COMPAT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/savepoint-v4");

fn compat_job(dir: &Path, rate: u32) -> std::path::PathBuf {
    let sql = std::fs::read_to_string(Path::new(COMPAT).join("job.sql")).unwrap();
    write_script(
        dir,
        "job.sql",
        &render(&sql, &[("rate", &rate.to_string())]),
    )
}

/// The printed rows of each sink of the compat job, without the subtask prefix: rows of
/// append-only sinks sorted, the changelog of the updating one (`totals`) applied.
fn printed_tables(text: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut changes: std::collections::BTreeMap<String, std::collections::BTreeMap<String, i64>> =
        Default::default();
    for line in text.lines() {
        let Some((sink, rest)) = line.split_once(':') else {
            continue;
        };
        let row = rest.split_once("> ").map_or(rest, |(_, r)| r).trim();
        let (kind, values) = row.split_at(2);
        let delta = match kind {
            "+I" | "+U" => 1,
            "-U" | "-D" => -1,
            _ => panic!("not a printed row: {line}"),
        };
        *changes
            .entry(sink.to_string())
            .or_default()
            .entry(values.to_string())
            .or_default() += delta;
    }
    changes
        .into_iter()
        .map(|(sink, rows)| {
            let mut table = Vec::new();
            for (row, n) in rows {
                assert!(n >= 0, "{sink}: {row} retracted more often than added");
                table.extend(std::iter::repeat_n(row, n as usize));
            }
            (sink, table)
        })
        .collect()
}

/// A savepoint written by this checkpoint format (version 4: keyed state in key groups of
/// Weir's own key hash) must keep restoring: every operator's keyed state, at another
/// parallelism, completing exactly the rows an uninterrupted run gives. A change to the
/// key hash, the key-group split or a state codec fails here.
#[test]
fn the_checked_in_savepoint_restores_at_another_parallelism() {
    let tmp = tempfile::tempdir().unwrap();
    let job = compat_job(tmp.path(), 3000);
    let whole = printed_tables(&run_ok(&[job.to_str().unwrap(), "-p", "2"]));
    // Restore from a copy: a restore must not need to write into the savepoint.
    let savepoint = tmp.path().join("savepoint");
    copy_dir(&Path::new(COMPAT).join("savepoint"), &savepoint);
    let after = run_ok(&[
        job.to_str().unwrap(),
        "-p",
        "3",
        "--restore",
        savepoint.to_str().unwrap(),
    ]);
    let before = std::fs::read_to_string(Path::new(COMPAT).join("before.txt")).unwrap();
    let (before_rows, after_rows) = (before.lines().count(), after.lines().count());
    assert!(
        before_rows > 100 && after_rows > 100,
        "the savepoint should be part-way: {before_rows} rows before it, {after_rows} after"
    );
    let resumed = printed_tables(&format!("{before}{after}"));
    assert_eq!(
        resumed.keys().collect::<Vec<_>>(),
        ["firsts", "leaders", "matched", "totals", "windows"]
    );
    for (sink, rows) in &whole {
        assert_eq!(
            &resumed[sink], rows,
            "{sink}: the run resumed from the checked-in savepoint differs from a whole run"
        );
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Writes `tests/data/savepoint-v4/{savepoint,before.txt}` again. Run it only when the
/// checkpoint format version changes (and rename the folder with it):
/// `cargo test --test tests write_the_compat_savepoint -- --ignored`.
#[test]
#[ignore]
fn write_the_compat_savepoint() {
    let tmp = tempfile::tempdir().unwrap();
    let job = compat_job(tmp.path(), 1500);
    let printed = std::fs::File::create(tmp.path().join("before.txt")).unwrap();
    let (mut child, id) = start_listed(tmp.path(), &job, printed.into());
    std::thread::sleep(Duration::from_millis(1500));
    let taken = stop(tmp.path(), &id, false);
    assert!(child.wait().unwrap().success());
    let target = Path::new(COMPAT).join("savepoint");
    let _ = std::fs::remove_dir_all(&target);
    copy_dir(Path::new(&taken), &target);
    std::fs::copy(
        tmp.path().join("before.txt"),
        Path::new(COMPAT).join("before.txt"),
    )
    .unwrap();
}
