//! Exactly-once around recovery: the operator mistakes and accidents a deployment meets
//! (checkpoints deleted or mistyped, two restores at once, two jobs of one script sharing
//! an output folder, corrupted checkpoint files). Each test compares the committed output
//! with an undisturbed run's: nothing lost, nothing duplicated.

use crate::common::*;
use crate::crash::{assert_exactly_once, assert_same_rows, expected, script_to};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

/// The crash suite's job (datagen → filter → json files under `<dir>/out`), with
/// checkpoints under `<dir>/chk` every 100 ms, always started with `--restore latest`.
struct Job {
    script: String,
    chk: PathBuf,
    extra: Vec<String>,
}

impl Job {
    fn new(dir: &Path, rows: u64, rate: u64) -> Self {
        Self {
            script: script_to(dir, dir.join("out").to_str().unwrap(), rows, rate),
            chk: dir.join("chk"),
            extra: Vec::new(),
        }
    }

    fn args(&self, restore: bool) -> Vec<String> {
        let mut a = vec![
            self.script.clone(),
            "-p".into(),
            "2".into(),
            "--checkpoint-dir".into(),
            self.chk.display().to_string(),
            "--checkpoint-interval".into(),
            "100 ms".into(),
        ];
        if restore {
            a.extend(["--restore".into(), "latest".into()]);
        }
        a.extend(self.extra.iter().cloned());
        a
    }

    fn run(&self, restore: bool) -> Output {
        let args = self.args(restore);
        run(&args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// Runs until the failpoint `point` aborts the process.
    fn crash_at(&self, point: &str) {
        let args = self.args(true);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = spawn(&args, &[("WEIR_FAILPOINTS", point)])
            .wait_with_output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("failpoint"),
            "{point}: the job did not stop at the failpoint: {err}"
        );
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

fn committed_count(dir: &Path) -> usize {
    committed_lines(&dir.join("out")).len()
}

/// The "silent fresh start": the checkpoints are deleted (or the folder mistyped)
/// and the job is started with `--restore latest`. It used to start from scratch without a
/// word and commit every row a second time; now it refuses, naming the output it would
/// duplicate, until the user starts from scratch explicitly (without `--restore`).
#[test]
fn restore_latest_with_checkpoints_gone_refuses_to_write_committed_rows_again() {
    let rows = 4000;
    let expected = expected(rows);
    let tmp = tempfile::tempdir().unwrap();
    let job = Job::new(tmp.path(), rows, 5000);
    job.crash_at("after-metadata=3");
    let committed = committed_count(tmp.path());
    assert!(committed > 0, "nothing was committed before the crash");

    std::fs::remove_dir_all(&job.chk).unwrap();
    let refused = job.run(true);
    let err = stderr(&refused);
    assert!(!refused.status.success(), "a fresh start was not refused");
    assert!(
        err.contains("found no checkpoint") && err.contains("committed part"),
        "unclear refusal: {err}"
    );
    // A mistyped folder is the same mistake.
    let mut typo = Job::new(tmp.path(), rows, 5000);
    typo.chk = tmp.path().join("chk-typo");
    assert!(!typo.run(true).status.success());
    assert_eq!(
        committed_count(tmp.path()),
        committed,
        "the refused runs wrote rows"
    );

    // Starting from scratch on purpose works (and says what it adds to).
    let fresh = job.run(false);
    assert!(fresh.status.success(), "{}", stderr(&fresh));
    assert!(stderr(&fresh).contains("earlier run"), "{}", stderr(&fresh));
    assert_eq!(committed_count(tmp.path()), committed + expected.len());

    // Nothing committed yet: `--restore latest` starts from scratch, with a warning.
    let other = tempfile::tempdir().unwrap();
    let clean = Job::new(other.path(), rows, 1_000_000);
    let out = clean.run(true);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no completed checkpoint"),
        "no warning: {}",
        stderr(&out)
    );
    assert_exactly_once(other.path(), &expected, "fresh start with --restore latest");
}

/// The "two restores at once": two runs restoring the same checkpoints used to
/// both run and both commit. The checkpoint folder is claimed by one run; the other is
/// refused with the holder's name, and the job's output stays exactly once.
#[test]
fn two_restores_at_once_are_refused_and_output_stays_exactly_once() {
    let rows = 20_000;
    let expected = expected(rows);
    let tmp = tempfile::tempdir().unwrap();
    let job = Job::new(tmp.path(), rows, 4000);
    let args = job.args(true);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Run until a checkpoint exists, then kill it.
    let mut first = spawn(&args, &[]);
    let started = Instant::now();
    while !has_checkpoint(&job.chk) {
        assert!(started.elapsed() < Duration::from_secs(30), "no checkpoint");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    first.kill().unwrap();
    first.wait().unwrap();
    // Two restores at once: one runs, the other is refused at once.
    let (a, b) = (spawn(&args, &[]), spawn(&args, &[]));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let (winner, loser) = if a.status.success() { (a, b) } else { (b, a) };
    assert!(winner.status.success(), "{}", stderr(&winner));
    assert!(!loser.status.success(), "both restores ran");
    let err = stderr(&loser);
    assert!(
        err.contains("is in use by job") && err.contains("process"),
        "unclear refusal: {err}"
    );
    assert_exactly_once(tmp.path(), &expected, "two restores at once");
}

/// The "two jobs, one output folder": two jobs of the same script shape (their
/// sinks used to get the same tag) write into one folder, with their own checkpoints. A
/// restore of one used to delete the other's pending parts, which then could never
/// recover ("pending not found"). Both crash with parts pending; both recover; together
/// they commit both jobs' rows exactly once.
#[test]
fn two_jobs_of_one_script_shape_share_an_output_folder_and_recover_apart() {
    let rows = 4000;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let a = Job::new(tmp.path(), rows, 5000);
    // The same script reading other ids, with its own checkpoints.
    let b_dir = tmp.path().join("b");
    std::fs::create_dir(&b_dir).unwrap();
    let text = std::fs::read_to_string(&a.script).unwrap().replace(
        "'fields.id.start' = '1', 'fields.id.end' = '4000'",
        "'fields.id.start' = '100001', 'fields.id.end' = '104000'",
    );
    let b = Job {
        script: write_script(&b_dir, "job.sql", &text).display().to_string(),
        chk: b_dir.join("chk"),
        extra: Vec::new(),
    };
    // What each commits alone.
    let reference = |job: &Job| {
        let dir = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(&job.script).unwrap().replace(
            out.to_str().unwrap(),
            dir.path().join("out").to_str().unwrap(),
        );
        let s = write_script(dir.path(), "ref.sql", &text);
        run_ok(&[s.to_str().unwrap(), "-p", "1"]);
        committed_lines(&dir.path().join("out"))
    };
    let mut both = reference(&a);
    both.extend(reference(&b));
    both.sort();

    a.crash_at("after-metadata=3");
    b.crash_at("after-metadata=3");
    let pending = |dir: &Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".pending"))
            .count()
    };
    assert!(pending(&out) > 0, "no pending parts at the crashes");
    // B restores first: it must leave A's pending parts alone.
    let rb = b.run(true);
    assert!(rb.status.success(), "{}", stderr(&rb));
    let ra = a.run(true);
    assert!(ra.status.success(), "A could not recover: {}", stderr(&ra));
    assert_same_rows(committed_lines(&out), &both, "two jobs, one folder");
    assert_eq!(pending(&out), 0, "pending parts left behind");
}

/// Flips `n` bytes in the middle of `file`.
fn corrupt(file: &Path, n: usize) {
    let mut bytes = std::fs::read(file).unwrap();
    let (mid, len) = (bytes.len() / 2, bytes.len());
    for b in &mut bytes[mid..(mid + n).min(len)] {
        *b ^= 0x5a;
    }
    std::fs::write(file, bytes).unwrap();
}

/// Completed checkpoints under `chk` (`chk-N` folders with `_metadata`), oldest first.
fn checkpoints(chk: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for job in std::fs::read_dir(chk).unwrap().flatten() {
        if !job.path().is_dir() {
            continue;
        }
        for c in std::fs::read_dir(job.path()).unwrap().flatten() {
            if c.path().join("_metadata").exists() {
                found.push(c.path());
            }
        }
    }
    let id = |p: &PathBuf| -> u64 {
        p.file_name().unwrap().to_str().unwrap()["chk-".len()..]
            .parse()
            .unwrap()
    };
    found.sort_by_key(id);
    found
}

/// The largest state file of a checkpoint (the sink's or the source's).
fn largest_state_file(checkpoint: &Path) -> PathBuf {
    std::fs::read_dir(checkpoint)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "state"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .expect("a state file")
}

/// The "corrupted state is accepted": 16 flipped bytes in a state file, or an
/// edited number in a checkpoint, used to restore silently and produce wrong rows. A
/// corrupt checkpoint is refused with an error naming the file; `--restore latest` falls
/// back to the previous retained checkpoint with a warning. Here the newest checkpoint's
/// commits never ran (the crash came right after its `_metadata`), so the fallback is
/// exactly once.
#[test]
fn corrupt_checkpoints_are_refused_and_restore_latest_falls_back() {
    let rows = 4000;
    let expected = expected(rows);
    let tmp = tempfile::tempdir().unwrap();
    let mut job = Job::new(tmp.path(), rows, 5000);
    job.extra = vec!["-D".into(), "execution.checkpointing.num-retained=3".into()];
    job.crash_at("after-metadata=4");
    let all = checkpoints(&job.chk);
    assert!(all.len() >= 2, "checkpoints: {all:?}");
    let newest = all.last().unwrap().clone();
    let state = largest_state_file(&newest);
    corrupt(&state, 16);

    // Named explicitly, a corrupt checkpoint is refused, naming the file.
    let out = run(&[
        &job.script,
        "--restore",
        newest.to_str().unwrap(),
        "--checkpoint-dir",
        tmp.path().join("elsewhere").to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert!(!out.status.success(), "a corrupt checkpoint was restored");
    assert!(
        err.contains("corrupt") && err.contains(state.file_name().unwrap().to_str().unwrap()),
        "unclear error: {err}"
    );
    // An edited number in _metadata (a subtask's status, a file name) is refused too.
    let meta = newest.join("_metadata");
    let text = std::fs::read_to_string(&meta).unwrap();
    let edited = text.replacen("\"subtask\": 1", "\"subtask\": 0", 1);
    assert_ne!(text, edited);
    std::fs::write(&meta, edited).unwrap();
    let out = run(&[
        &job.script,
        "--restore",
        meta.to_str().unwrap(),
        "--checkpoint-dir",
        tmp.path().join("elsewhere").to_str().unwrap(),
    ]);
    assert!(
        !out.status.success() && stderr(&out).contains("checksum"),
        "an edited _metadata was accepted: {}",
        stderr(&out)
    );
    assert!(committed_count(tmp.path()) < expected.len());

    // --restore latest skips it, says so, and restores the previous checkpoint.
    let out = job.run(true);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("corrupt") && err.contains("older checkpoint"),
        "no warning: {err}"
    );
    assert_exactly_once(tmp.path(), &expected, "fallback past a corrupt checkpoint");
}

/// With no sound checkpoint to fall back to, `--restore latest` refuses (instead of
/// starting from scratch and committing everything again).
#[test]
fn restore_latest_refuses_when_every_checkpoint_is_corrupt() {
    let rows = 4000;
    let tmp = tempfile::tempdir().unwrap();
    let job = Job::new(tmp.path(), rows, 5000);
    job.crash_at("after-metadata=3");
    let before = committed_count(tmp.path());
    let all = checkpoints(&job.chk);
    for c in &all {
        corrupt(&largest_state_file(c), 16);
    }
    let out = job.run(true);
    let err = stderr(&out);
    assert!(!out.status.success(), "restored from a corrupt checkpoint");
    assert!(
        err.contains("corrupt") && err.contains("num-retained"),
        "unclear error: {err}"
    );
    assert_eq!(committed_count(tmp.path()), before);
}

/// `--restore` pointed at something that is not a checkpoint folder says so and creates
/// nothing (it used to create a folder at a path that did not exist, and try to create
/// one inside a regular file).
#[test]
fn restore_from_a_missing_path_or_a_file_says_so_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let job = Job::new(tmp.path(), 10, 1_000_000);
    let missing = tmp.path().join("no-such-checkpoint");
    let out = run(&[&job.script, "--restore", missing.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains(missing.to_str().unwrap()) && err.contains("No such file"),
        "{err}"
    );
    assert!(!missing.exists(), "the missing path was created");
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = run(&[&job.script, "--restore", file.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(err.contains("is a file, not a checkpoint folder"), "{err}");
    assert!(file.is_file());
}

/// Two restores at once, again and again: every round starts two runs of the job with
/// `--restore latest` at the same moment and SIGKILLs whatever still runs after a random
/// while. One of each pair is refused (the folder is claimed); the output stays exactly
/// once.
#[test]
fn racing_restores_under_sigkill_stay_exactly_once() {
    let rows = 40_000;
    let expected = expected(rows);
    let tmp = tempfile::tempdir().unwrap();
    let job = Job::new(tmp.path(), rows, 2500);
    let args = job.args(true);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut rng = Lcg(11);
    let (mut kills, mut refused) = (0, 0);
    for _ in 0..12 {
        let mut pair = [spawn(&args, &[]), spawn(&args, &[])];
        std::thread::sleep(Duration::from_millis(200 + rng.next(600)));
        for child in &mut pair {
            match child.try_wait().unwrap() {
                Some(status) => {
                    assert!(!status.success(), "the job finished too early");
                    refused += 1;
                }
                None => {
                    child.kill().unwrap();
                    kills += 1;
                }
            }
            child.wait().unwrap();
        }
    }
    let out = job.run(true);
    assert!(out.status.success(), "{}", stderr(&out));
    eprintln!(
        "crash test (racing restores): {kills} SIGKILLs, {refused} runs refused, {} rows checked, 0 lost, 0 duplicated",
        expected.len()
    );
    assert!(refused >= 10, "only {refused} of 24 runs were refused");
    assert_exactly_once(tmp.path(), &expected, "racing restores under SIGKILL");
}
