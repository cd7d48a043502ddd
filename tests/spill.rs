//! State larger than memory: past `taskmanager.memory.managed.size`, a join's oldest
//! stored rows move to local disk and are read back when a probe needs them, and the
//! least recently used keys of Top-N and updating aggregates move there and come back
//! when their rows do.
//! The job's rows must not change, and a job whose state is on disk when it is killed
//! restores exactly once.

use crate::common::*;

/// The dimension join of the state tests — 40,000 rows (~7 MB of join state,
/// 160-character names) read at once, then events that trickle in and look names up all
/// over it — under a memory budget: with 1 MB most of the dimension is on disk when the
/// events probe it.
fn spilling_join(dir: &std::path::Path, budget: &str, events: u64, rate: u64) -> String {
    crate::state::dimension_join_after(dir, &budget_settings(dir, budget), events, rate)
}

/// `SET` statements for a state memory budget of `budget`, spilling under `dir/spill`.
fn budget_settings(dir: &std::path::Path, budget: &str) -> String {
    format!(
        "SET 'taskmanager.memory.managed.size' = '{budget}';\nSET 'io.tmp.dirs' = '{}';\n",
        dir.join("spill").display()
    )
}

/// The dimension as the outer side of a `LEFT JOIN`: a dimension row shows padded with
/// NULLs until its first event arrives, which retracts that row, so each stored dimension
/// row carries a flag (matched), written with it in checkpoints.
const OUTER_JOIN: &str = "
CREATE TABLE out (id BIGINT, name_length INT, eid BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'debezium-json');
INSERT INTO out SELECT d.id, CHAR_LENGTH(d.name), e.eid FROM dim d LEFT JOIN events e ON d.id = e.ref;
";

fn spilling_outer_join(dir: &std::path::Path, budget: &str, events: u64, rate: u64) -> String {
    crate::state::dimension_job(dir, &budget_settings(dir, budget), OUTER_JOIN, events, rate)
}

/// The final rows of [`OUTER_JOIN`] (materialized) are right for any events: each of the
/// `events` events is joined exactly once, and each dimension row appears either joined
/// or, without any event, once padded with NULLs.
fn check_outer_join(rows: &[String], events: i64) {
    let mut eids = Vec::new();
    let (mut joined, mut padded) = (std::collections::BTreeSet::new(), Vec::new());
    for row in rows {
        let row: serde_json::Value = serde_json::from_str(row).unwrap();
        let id = row["id"].as_i64().unwrap();
        assert_eq!(row["name_length"], 160, "{row}");
        match row["eid"].as_i64() {
            Some(eid) => {
                eids.push(eid);
                joined.insert(id);
            }
            None => padded.push(id),
        }
    }
    eids.sort();
    assert_eq!(
        eids,
        (1..=events).collect::<Vec<_>>(),
        "events lost or joined twice"
    );
    padded.sort();
    let lonely: Vec<i64> = (1..=40_000).filter(|id| !joined.contains(id)).collect();
    assert_eq!(
        padded, lonely,
        "padded rows of dimension rows with events, or missing"
    );
}

const SPILLING: &str = "spilling the oldest rows";

/// Runs the job `script` writes under `budget`, checkpointing every 300 ms; returns its
/// committed lines, its log and the largest state a checkpoint reported.
fn run_spilling(
    script: impl Fn(&std::path::Path, &str) -> String,
    budget: &str,
) -> (Vec<String>, String, u64) {
    let tmp = tempfile::tempdir().unwrap();
    let script = script(tmp.path(), budget);
    let log = crate::state::run_checkpointed(&script, &tmp.path().join("chk"), "300 ms", &[]);
    let rows = committed_lines(&tmp.path().join("out"));
    let state = crate::state::checkpoint_sizes(&log)
        .iter()
        .map(|(state, _)| *state)
        .max()
        .unwrap_or(0);
    (rows, log, state)
}

/// With a 1 MB budget the join's state (over 5 MB: every checkpoint reports it) spills
/// and the job gives the rows of the same job with a 1 GB budget, which keeps everything
/// in memory; both checkpoint, so encoded state kept on disk is written too.
#[test]
fn join_state_past_the_memory_budget_spills_and_gives_the_same_rows() {
    let run = |budget| run_spilling(|dir, budget| spilling_join(dir, budget, 3000, 1500), budget);
    let (spilled, log, state) = run("1 mb");
    assert!(log.contains(SPILLING), "nothing spilled:\n{log}");
    // Every checkpoint was written: parts of completed checkpoints, no longer on local
    // disk, were referred to and never read.
    assert!(!log.contains("restarting"), "the job failed:\n{log}");
    assert!(
        state > 5 << 20,
        "the state ({state} bytes) is not 5 times the budget"
    );
    let (in_memory, log, _) = run("1 gb");
    assert!(!log.contains(SPILLING), "spilled under 1 GB:\n{log}");
    assert_eq!(spilled.len(), 3000);
    assert_eq!(spilled, in_memory);
}

/// A `LEFT JOIN` whose outer side (the dimension, flagged when matched) spills under a
/// 1 MB budget gives the rows of the same job in memory, and right ones.
#[test]
fn outer_join_state_past_the_memory_budget_spills_and_gives_the_same_rows() {
    let run = |budget| {
        let script =
            |dir: &std::path::Path, budget: &str| spilling_outer_join(dir, budget, 3000, 1500);
        let (lines, log, state) = run_spilling(script, budget);
        (materialize(lines), log, state)
    };
    let (spilled, log, state) = run("1 mb");
    assert!(log.contains(SPILLING), "nothing spilled:\n{log}");
    assert!(!log.contains("restarting"), "the job failed:\n{log}");
    assert!(
        state > 5 << 20,
        "the state ({state} bytes) is not 5 times the budget"
    );
    check_outer_join(&spilled, 3000);
    let (in_memory, log, _) = run("1 gb");
    assert!(!log.contains(SPILLING), "spilled under 1 GB:\n{log}");
    assert_eq!(spilled, in_memory);
}

/// The spilling `LEFT JOIN` under SIGKILLs, restored each time from the latest checkpoint
/// (whose dimension rows and flags were written from disk): its final rows are right.
#[test]
fn spilled_outer_join_state_is_exactly_once_under_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let script = spilling_outer_join(tmp.path(), "1 mb", 3000, 600);
    let (_, lines) = crate::crash::committed_after_kills(tmp.path(), &script, 10, 29);
    check_outer_join(&materialize(lines), 3000);
}

/// The spilling join under SIGKILLs, restored each time from the latest checkpoint (whose
/// join state was written from disk): every event is joined exactly once.
#[test]
fn spilled_join_state_is_exactly_once_under_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let script = spilling_join(tmp.path(), "1 mb", 3000, 600);
    let (kills, lines) = crate::crash::committed_after_kills(tmp.path(), &script, 10, 23);
    let eids: Vec<i64> = lines
        .iter()
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        lines.len(),
        3000,
        "events joined twice after {kills} SIGKILLs"
    );
    assert_eq!(
        eids,
        (1..=3000).collect::<Vec<_>>(),
        "events lost after {kills} SIGKILLs"
    );
}

/// The spilling join under SIGKILLs, each run at another parallelism (2, 3, 1, …): a
/// subtask restored from parts written at another parallelism keeps only the rows of
/// its own key groups, so no event is joined twice after the next restore either.
#[test]
fn spilled_join_state_is_exactly_once_when_restored_at_other_parallelisms() {
    let tmp = tempfile::tempdir().unwrap();
    let script = spilling_join(tmp.path(), "1 mb", 3000, 600);
    let (kills, lines) =
        crate::crash::committed_after_kills_at(tmp.path(), &script, &["2", "3", "1"], 8, 37);
    let mut eids: Vec<i64> = lines
        .iter()
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect();
    eids.sort();
    assert_eq!(
        eids,
        (1..=3000).collect::<Vec<_>>(),
        "events lost or joined twice after {kills} SIGKILLs and rescalings"
    );
}

/// Keyed state whose keys come back: row `seq` goes to key `seq % 30000`, so by the time
/// a key's next row arrives the 29,999 others were used since. Each row carries 250
/// characters, so the state of the queries below (~24 MB in checkpoints) is over 5 times
/// a 4 MB budget, and most rows reach a key whose state the operator moved to disk.
/// `${query}` reads `keyed`, `(k, seq, score, pad)`.
const RETURNING_KEYS: &str = "
SET 'taskmanager.memory.managed.size' = '${budget}';
SET 'io.tmp.dirs' = '${spill}';
CREATE TABLE src (seq BIGINT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '${rate}',
  'fields.seq.kind' = 'sequence', 'fields.seq.start' = '0', 'fields.seq.end' = '89999'
);
CREATE VIEW keyed AS
  SELECT seq % 30000 AS k, seq, seq * 7919 % 1000003 AS score, REPEAT('x', 250) AS pad
  FROM src;
${query}
";

/// A Top-3 per key (Top-N keeps the rows, pad included).
const TOP_3: &str = "
CREATE TABLE out (k BIGINT, seq BIGINT, rn BIGINT, pad INT)
  WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'debezium-json');
INSERT INTO out
SELECT k, seq, rn, CHAR_LENGTH(pad) FROM (
  SELECT k, seq, pad, ROW_NUMBER() OVER (PARTITION BY k ORDER BY score DESC) AS rn
  FROM keyed
) WHERE rn <= 3;
";

/// An aggregate with `COUNT(DISTINCT …)` over long strings, which the row-at-a-time
/// aggregate runs: its state is the set of each key's three strings.
const DISTINCT: &str = "
CREATE TABLE out (k BIGINT, n BIGINT, total BIGINT, d BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'debezium-json');
INSERT INTO out
SELECT k, COUNT(*), SUM(seq), COUNT(DISTINCT CONCAT(pad, CAST(seq AS STRING)))
FROM keyed GROUP BY k;
";

/// An aggregate the vectorized implementation runs (append-only input, no `DISTINCT`):
/// its state holds each key's longest string, 755 characters.
const VECTORIZED: &str = "
CREATE TABLE out (k BIGINT, n BIGINT, total BIGINT, longest INT)
  WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'debezium-json');
INSERT INTO out
SELECT k, COUNT(*), SUM(seq), CHAR_LENGTH(MAX(CONCAT(pad, pad, pad, CAST(seq AS STRING))))
FROM keyed GROUP BY k;
";

fn returning_keys(dir: &std::path::Path, query: &str, budget: &str, rate: u64) -> String {
    budget_job(
        dir,
        &RETURNING_KEYS.replace("${query}", query),
        budget,
        rate,
        &[],
    )
}

/// `template` written as `dir/job.sql` (returned) with its `${budget}` and `${rate}`, and
/// `${spill}` and `${out}` folders in `dir`, and `vars`.
fn budget_job(
    dir: &std::path::Path,
    template: &str,
    budget: &str,
    rate: u64,
    vars: &[(&str, &str)],
) -> String {
    let mut all = vec![
        ("budget", budget.to_string()),
        ("spill", dir.join("spill").to_str().unwrap().to_string()),
        ("out", dir.join("out").to_str().unwrap().to_string()),
        ("rate", rate.to_string()),
    ];
    all.extend(vars.iter().map(|(k, v)| (*k, v.to_string())));
    let all: Vec<(&str, &str)> = all.iter().map(|(k, v)| (*k, v.as_str())).collect();
    write_script(dir, "job.sql", &render(template, &all))
        .to_str()
        .unwrap()
        .to_string()
}

/// The final rows of `query` over [`RETURNING_KEYS`], sorted, as `materialize` shows
/// them.
fn returning_keys_result(query: &str) -> Vec<String> {
    let mut rows: Vec<String> = (0..30_000i64)
        .flat_map(|k| {
            let mut seqs: Vec<i64> = (0..3).map(|round| k + 30_000 * round).collect();
            let total: i64 = seqs.iter().sum();
            if query == DISTINCT {
                let row = format!("{{\"k\":{k},\"n\":3,\"total\":{total},\"d\":3}}");
                return vec![row];
            }
            if query == VECTORIZED {
                let longest = 750 + seqs.iter().map(|s| s.to_string()).max().unwrap().len();
                let row = format!("{{\"k\":{k},\"n\":3,\"total\":{total},\"longest\":{longest}}}");
                return vec![row];
            }
            seqs.sort_by_key(|seq| std::cmp::Reverse(seq * 7919 % 1_000_003));
            (seqs.into_iter().enumerate())
                .map(|(r, seq)| format!("{{\"k\":{k},\"seq\":{seq},\"rn\":{},\"pad\":250}}", r + 1))
                .collect()
        })
        .collect();
    rows.sort();
    rows
}

const MOVING_KEYS: &str = "moving the least recently used keys";

/// Under `budget`, `query` gives its rows, checkpointing every 300 ms; returns the log.
fn run_returning_keys(query: &str, budget: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let script = returning_keys(tmp.path(), query, budget, 100_000);
    let log = crate::state::run_checkpointed(&script, &tmp.path().join("chk"), "300 ms", &[]);
    assert_eq!(
        materialize(committed_lines(&tmp.path().join("out"))),
        returning_keys_result(query)
    );
    log
}

/// Under a 4 MB budget, `query` moves its least recently used keys to disk and takes
/// them back as their rows come (its checkpoints, whole and incremental, read them
/// there), and its rows are those of the query.
fn state_past_the_budget_moves_to_disk(query: &str) {
    let log = run_returning_keys(query, "4 mb");
    assert!(log.contains(MOVING_KEYS), "nothing moved to disk:\n{log}");
    assert_state_over_5_times_4_mb(&log);
}

/// Asserts that the largest state a checkpoint in `log` held is over 5 times 4 MB.
fn assert_state_over_5_times_4_mb(log: &str) {
    let state = crate::state::checkpoint_sizes(log)
        .iter()
        .map(|(state, _)| *state)
        .max()
        .unwrap_or(0);
    assert!(
        state > 5 * (4 << 20),
        "the state ({state} bytes) is not 5 times the 4 MB budget"
    );
}

/// Runs the job `script_of(dir, budget)` with 300 ms checkpoints under 4 MB, where state
/// moves to disk (the log says `moving`) and its checkpoints hold over 5 times the budget,
/// and under 1 GB, where nothing moves: both commit `expected`.
fn same_rows_past_the_budget(
    script_of: impl Fn(&std::path::Path, &str) -> String,
    moving: &str,
    expected: &[String],
) {
    for (budget, moves) in [("4 mb", true), ("1 gb", false)] {
        let tmp = tempfile::tempdir().unwrap();
        let script = script_of(tmp.path(), budget);
        let log = crate::state::run_checkpointed(&script, &tmp.path().join("chk"), "300 ms", &[]);
        let rows = committed_lines(&tmp.path().join("out"));
        assert_rows(&rows, expected, &format!("under {budget}"));
        assert_eq!(log.contains(moving), moves, "under {budget}:\n{log}");
        if moves {
            assert_state_over_5_times_4_mb(&log);
        }
    }
}

/// In memory, the `COUNT(DISTINCT …)` of strings keeps its sets across checkpoints.
/// (DataFusion's accumulator gives its set away when asked for its state: every
/// checkpoint emptied the sets, and each key ended with 1 distinct string of 3.)
#[test]
fn a_distinct_count_of_strings_is_exact_across_checkpoints() {
    let log = run_returning_keys(DISTINCT, "1 gb");
    assert!(
        !log.contains(MOVING_KEYS),
        "moved to disk under 1 GB:\n{log}"
    );
}

#[test]
fn top_n_state_past_the_memory_budget_moves_to_disk_and_gives_the_same_rows() {
    state_past_the_budget_moves_to_disk(TOP_3);
}

#[test]
fn aggregate_state_past_the_memory_budget_moves_to_disk_and_gives_the_same_rows() {
    state_past_the_budget_moves_to_disk(DISTINCT);
}

#[test]
fn vectorized_aggregate_state_past_the_memory_budget_moves_to_disk_and_gives_the_same_rows() {
    state_past_the_budget_moves_to_disk(VECTORIZED);
}

/// `query` over [`RETURNING_KEYS`] under SIGKILLs: each restore puts keys back on disk
/// under the budget, and the final rows are exact.
fn state_on_disk_is_exactly_once_under_sigkill(query: &str, seed: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let script = returning_keys(tmp.path(), query, "4 mb", 25_000);
    let (_, lines) = crate::crash::committed_after_kills(tmp.path(), &script, 8, seed);
    assert_eq!(materialize(lines), returning_keys_result(query));
}

#[test]
fn top_n_state_on_disk_is_exactly_once_under_sigkill() {
    state_on_disk_is_exactly_once_under_sigkill(TOP_3, 29);
}

#[test]
fn aggregate_state_on_disk_is_exactly_once_under_sigkill() {
    state_on_disk_is_exactly_once_under_sigkill(DISTINCT, 31);
}

#[test]
fn vectorized_aggregate_state_on_disk_is_exactly_once_under_sigkill() {
    state_on_disk_is_exactly_once_under_sigkill(VECTORIZED, 37);
}

/// A `TUMBLE` window aggregate over 30,000 keys whose state holds each key's longest
/// string (755 characters): the first minute's window (seq 0..59999, two rows a key)
/// holds ~24 MB of state, over 5 times a 4 MB budget; the second (seq 60000..89999)
/// one row a key. Rows come at `${rate}` a second; event time is `seq` milliseconds,
/// and the watermark `${delay}` seconds behind it.
const WINDOWED: &str = "
SET 'taskmanager.memory.managed.size' = '${budget}';
SET 'io.tmp.dirs' = '${spill}';
CREATE TABLE src (
  seq BIGINT,
  k AS seq % 30000,
  ts AS TO_TIMESTAMP_LTZ(seq, 3),
  WATERMARK FOR ts AS ts - INTERVAL '${delay}' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '${rate}',
  'fields.seq.kind' = 'sequence', 'fields.seq.start' = '0', 'fields.seq.end' = '89999'
);
CREATE TABLE out (k BIGINT, w TIMESTAMP(3), n BIGINT, total BIGINT, longest INT)
  WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');
INSERT INTO out
SELECT k, window_start, COUNT(*), SUM(seq),
       CHAR_LENGTH(MAX(CONCAT(REPEAT('x', 750), CAST(seq AS STRING))))
FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY k, window_start, window_end;
";

fn windowed(dir: &std::path::Path, budget: &str, rate: u64, delay: u64) -> String {
    budget_job(
        dir,
        WINDOWED,
        budget,
        rate,
        &[("delay", &delay.to_string())],
    )
}

/// The rows of [`WINDOWED`], sorted, worked out from the generator.
fn windowed_result() -> Vec<String> {
    let row = |k: i64, w: &str, seqs: &[i64]| {
        let (n, total) = (seqs.len(), seqs.iter().sum::<i64>());
        let longest = 750 + seqs.iter().map(|s| s.to_string()).max().unwrap().len();
        format!(
            "{{\"k\":{k},\"w\":\"1970-01-01 00:0{w}\",\"n\":{n},\"total\":{total},\"longest\":{longest}}}"
        )
    };
    let mut rows: Vec<String> = (0..30_000i64)
        .flat_map(|k| {
            [
                row(k, "0:00", &[k, k + 30_000]),
                row(k, "1:00", &[k + 60_000]),
            ]
        })
        .collect();
    rows.sort();
    rows
}

/// Asserts that `rows` are `expected` (both sorted), naming how many rows are lost and
/// how many are extra (duplicated or wrong), with a few of each.
fn assert_rows(rows: &[String], expected: &[String], what: &str) {
    let mut counts: std::collections::BTreeMap<&str, i64> = Default::default();
    for r in expected {
        *counts.entry(r).or_default() += 1;
    }
    for r in rows {
        *counts.entry(r).or_default() -= 1;
    }
    let lost: Vec<&str> = (counts.iter())
        .filter(|(_, n)| **n > 0)
        .map(|(r, _)| *r)
        .collect();
    let extra: Vec<&str> = (counts.iter())
        .filter(|(_, n)| **n < 0)
        .map(|(r, _)| *r)
        .collect();
    assert!(
        lost.is_empty() && extra.is_empty(),
        "{what}: {} rows of {} committed; {} lost (e.g. {:?}), {} extra (e.g. {:?})",
        rows.len(),
        expected.len(),
        lost.len(),
        &lost[..lost.len().min(3)],
        extra.len(),
        &extra[..extra.len().min(3)],
    );
}

const MOVING_WINDOWS: &str = "moving partial window aggregates";

/// Under a 4 MB budget the window's partial states move to disk in runs, merged a
/// bucket at a time when the window fires (its checkpoints refer to the runs), and the
/// rows are those of the query; under 1 GB nothing moves.
#[test]
fn window_aggregate_state_past_the_memory_budget_moves_to_disk_and_gives_the_same_rows() {
    same_rows_past_the_budget(
        |dir, budget| windowed(dir, budget, 50_000, 0),
        MOVING_WINDOWS,
        &windowed_result(),
    );
}

/// Completed checkpoints under `chk` (`chk-N` folders with their `_metadata`) whose
/// window aggregate state holds runs.
fn checkpoints_with_runs(chk: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for job in std::fs::read_dir(chk).into_iter().flatten().flatten() {
        for c in std::fs::read_dir(job.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let dir = c.path();
            if !dir.join("_metadata").exists() {
                continue;
            }
            let runs = std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .any(|f| {
                    let name = f.file_name().to_string_lossy().into_owned();
                    let bytes = std::fs::read(f.path()).unwrap_or_default();
                    name.contains("window_aggregate")
                        && bytes.windows(10).any(|w| w == b"\"run\":true")
                });
            if runs {
                found.push(dir);
            }
        }
    }
    found
}

/// The same window aggregate killed (SIGKILL) at parallelism 2 once a checkpoint holds
/// runs, restored at parallelism 3 and killed once one of its own checkpoints does,
/// then restored at parallelism 1 to the end: each restore puts the state into runs
/// under the budget, keeping the rows of its own key groups (a run of one subtask at 2
/// holds key groups of two subtasks at 3), and every row is committed exactly once.
#[test]
fn window_aggregate_state_on_disk_is_exactly_once_when_killed_and_rescaled() {
    let tmp = tempfile::tempdir().unwrap();
    // Splits restored into fewer subtasks emit at their own pace, each a few thousand
    // rows (milliseconds) apart: with the watermark 40 s behind, both windows stay open
    // to the end and no row is late. At 8,000 rows a second each run lasts long enough
    // for a checkpoint to complete on a busy machine.
    let script = windowed(tmp.path(), "4 mb", 8_000, 40);
    let chk = tmp.path().join("chk");
    kill_twice_then_rescale(&script, tmp.path(), "a checkpoint held runs", || {
        let before = checkpoints_with_runs(&chk);
        let chk = chk.clone();
        move |_: &str| (checkpoints_with_runs(&chk).iter()).any(|c| !before.contains(c))
    });
    let rows = committed_lines(&tmp.path().join("out"));
    assert_rows(&rows, &windowed_result(), "restored at 3, then 1");
}

/// A session window aggregate (gap 25 s) whose state holds each session's longest string
/// (1,505 characters). Event time is `seq` milliseconds, the watermark `${delay}` seconds
/// behind. Even rows go to 10,000 keys with a row every 20 s: one session each, open to
/// the end, whose rows keep coming back to it. Odd rows go to 30,000 keys with a row every
/// 60 s: sessions of one row, which the watermark closes during the run. About 22,500
/// sessions are open at once (~35 MB), over 5 times a 4 MB budget.
const SESSIONS: &str = "
SET 'taskmanager.memory.managed.size' = '${budget}';
SET 'io.tmp.dirs' = '${spill}';
CREATE TABLE src (
  seq BIGINT,
  k AS CASE WHEN seq % 2 = 0 THEN seq % 20000 ELSE seq % 60000 END,
  ts AS TO_TIMESTAMP_LTZ(seq, 3),
  WATERMARK FOR ts AS ts - INTERVAL '${delay}' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '${rate}',
  'fields.seq.kind' = 'sequence', 'fields.seq.start' = '0', 'fields.seq.end' = '89999'
);
CREATE TABLE out (k BIGINT, first BIGINT, n BIGINT, total BIGINT, longest INT)
  WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');
INSERT INTO out
SELECT k, MIN(seq), COUNT(*), SUM(seq),
       CHAR_LENGTH(MAX(CONCAT(REPEAT('x', 1500), CAST(seq AS STRING))))
FROM src GROUP BY k, SESSION(ts, INTERVAL '25' SECOND);
";

fn sessions(dir: &std::path::Path, budget: &str, rate: u64, delay: u64) -> String {
    budget_job(
        dir,
        SESSIONS,
        budget,
        rate,
        &[("delay", &delay.to_string())],
    )
}

/// The rows of [`SESSIONS`], sorted, worked out from the generator: a key's rows less
/// than the 25 s gap apart are one session.
fn sessions_result() -> Vec<String> {
    let mut by_key: std::collections::BTreeMap<i64, Vec<i64>> = Default::default();
    for seq in 0..90_000i64 {
        let k = if seq % 2 == 0 {
            seq % 20_000
        } else {
            seq % 60_000
        };
        by_key.entry(k).or_default().push(seq);
    }
    let row = |k: i64, seqs: &[i64]| {
        let (n, total) = (seqs.len(), seqs.iter().sum::<i64>());
        let longest = 1500 + seqs.iter().map(|s| s.to_string()).max().unwrap().len();
        let first = seqs[0];
        format!("{{\"k\":{k},\"first\":{first},\"n\":{n},\"total\":{total},\"longest\":{longest}}}")
    };
    let mut rows = Vec::new();
    for (k, seqs) in by_key {
        let mut session = vec![seqs[0]];
        for seq in &seqs[1..] {
            if seq - session.last().unwrap() >= 25_000 {
                rows.push(row(k, &session));
                session.clear();
            }
            session.push(*seq);
        }
        rows.push(row(k, &session));
    }
    rows.sort();
    rows
}

/// Under a 4 MB budget, the session aggregate moves the sessions of the keys that least
/// recently had rows to disk; rows of those keys and the watermark take them back (its
/// checkpoints read them there), and its rows are those of the query. Under 1 GB nothing
/// moves.
#[test]
fn session_aggregate_state_past_the_memory_budget_moves_to_disk_and_gives_the_same_rows() {
    let expected = sessions_result();
    assert_eq!(expected.len(), 10_000 + 30_000 + 15_000);
    same_rows_past_the_budget(
        |dir, budget| sessions(dir, budget, 50_000, 0),
        MOVING_KEYS,
        &expected,
    );
}

/// What [`moved_then_checkpointed`] waits for.
const KEYS_ON_DISK: &str = "a checkpoint held keys on disk";

/// Whether `log` shows a checkpoint that completed after keys moved to disk.
fn moved_then_checkpointed(log: &str) -> bool {
    log.find(MOVING_KEYS)
        .is_some_and(|at| !crate::state::checkpoint_sizes(&log[at..]).is_empty())
}

/// Runs `script` (checkpoints every 150 ms under `dir/chk`, logs into `dir`) at
/// parallelism 2 and kills it (SIGKILL) once `ready` holds, restores it at parallelism 3
/// and kills it likewise, then restores it at parallelism 1 to the end. `arm` makes each
/// run's `ready` before the run starts; `ready` is asked with the run's log so far.
/// `what` names the awaited state in a failure.
fn kill_twice_then_rescale<R: Fn(&str) -> bool>(
    script: &str,
    dir: &std::path::Path,
    what: &str,
    arm: impl Fn() -> R,
) {
    let chk = dir.join("chk");
    for p in ["2", "3"] {
        let log_path = dir.join(format!("log-{p}"));
        let mut args = vec![
            "run",
            "--quiet",
            script,
            "--checkpoint-dir",
            chk.to_str().unwrap(),
            "--checkpoint-interval",
            "150 ms",
            "-p",
            p,
        ];
        if p != "2" {
            args.extend(["--restore", "latest"]);
        }
        let ready = arm();
        let mut child = weir()
            .env("WEIR_LOG", "info")
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
        while !ready(&log()) {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the job ended at parallelism {p} before {what}:\n{}",
                log()
            );
            assert!(started.elapsed() < std::time::Duration::from_secs(120));
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }
    run_ok(&[
        script,
        "--checkpoint-dir",
        chk.to_str().unwrap(),
        "--checkpoint-interval",
        "150 ms",
        "-p",
        "1",
        "--restore",
        "latest",
    ]);
}

/// The same session aggregate killed (SIGKILL) at parallelism 2 once a checkpoint
/// completed after sessions moved to disk, restored at parallelism 3 and killed likewise,
/// then restored at parallelism 1 to the end: every session is committed exactly once.
#[test]
fn session_aggregate_state_on_disk_is_exactly_once_when_killed_and_rescaled() {
    let tmp = tempfile::tempdir().unwrap();
    // As in the window test: restored splits emit at their own pace, and the watermark
    // 40 s behind keeps every row on time.
    let script = sessions(tmp.path(), "4 mb", 8_000, 40);
    kill_twice_then_rescale(&script, tmp.path(), KEYS_ON_DISK, || {
        moved_then_checkpointed
    });
    let rows = committed_lines(&tmp.path().join("out"));
    assert_rows(&rows, &sessions_result(), "restored at 3, then 1");
}

/// A window Top-2 per key over `TUMBLE` windows of a minute, whose rows carry 750
/// characters: the first window (seq 0..59999) keeps two rows for each of 30,000 keys
/// (~48 MB), over 5 times a 4 MB budget; the second (seq 60000..89999) one. Event time
/// is `seq` milliseconds, the watermark `${delay}` seconds behind.
const WINDOW_TOP_2: &str = "
SET 'taskmanager.memory.managed.size' = '${budget}';
SET 'io.tmp.dirs' = '${spill}';
CREATE TABLE src (
  seq BIGINT,
  k AS seq % 30000,
  score AS seq * 7919 % 1000003,
  pad AS REPEAT('x', 750),
  ts AS TO_TIMESTAMP_LTZ(seq, 3),
  WATERMARK FOR ts AS ts - INTERVAL '${delay}' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '${rate}',
  'fields.seq.kind' = 'sequence', 'fields.seq.start' = '0', 'fields.seq.end' = '89999'
);
CREATE TABLE out (k BIGINT, seq BIGINT, rn BIGINT, pad INT)
  WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');
INSERT INTO out
SELECT k, seq, rn, CHAR_LENGTH(pad) FROM (
  SELECT *,
         ROW_NUMBER() OVER (PARTITION BY window_start, window_end, k ORDER BY score DESC) AS rn
  FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
) WHERE rn <= 2;
";

fn window_top_2(dir: &std::path::Path, budget: &str, rate: u64, delay: u64) -> String {
    budget_job(
        dir,
        WINDOW_TOP_2,
        budget,
        rate,
        &[("delay", &delay.to_string())],
    )
}

/// The rows of [`WINDOW_TOP_2`], sorted, worked out from the generator.
fn window_top_2_result() -> Vec<String> {
    let mut rows = Vec::new();
    for k in 0..30_000i64 {
        let mut first = vec![k, k + 30_000];
        first.sort_by_key(|seq| std::cmp::Reverse(seq * 7919 % 1_000_003));
        for seqs in [first, vec![k + 60_000]] {
            for (r, seq) in seqs.into_iter().enumerate() {
                let rn = r + 1;
                rows.push(format!(
                    "{{\"k\":{k},\"seq\":{seq},\"rn\":{rn},\"pad\":750}}"
                ));
            }
        }
    }
    rows.sort();
    rows
}

/// Under a 4 MB budget, the window Top-N moves the partitions that least recently had
/// rows to disk; a row of such a partition, and the watermark that makes it final, take
/// it back (its checkpoints read it there), and its rows are those of the query. Under
/// 1 GB nothing moves.
#[test]
fn window_top_n_state_past_the_memory_budget_moves_to_disk_and_gives_the_same_rows() {
    same_rows_past_the_budget(
        |dir, budget| window_top_2(dir, budget, 50_000, 0),
        MOVING_KEYS,
        &window_top_2_result(),
    );
}

/// The same window Top-N killed at parallelism 2 and 3 once a checkpoint completed after
/// partitions moved to disk, then restored at parallelism 1 to the end: every row is
/// committed exactly once.
#[test]
fn window_top_n_state_on_disk_is_exactly_once_when_killed_and_rescaled() {
    let tmp = tempfile::tempdir().unwrap();
    let script = window_top_2(tmp.path(), "4 mb", 8_000, 40);
    kill_twice_then_rescale(&script, tmp.path(), KEYS_ON_DISK, || {
        moved_then_checkpointed
    });
    let rows = committed_lines(&tmp.path().join("out"));
    assert_rows(&rows, &window_top_2_result(), "restored at 3, then 1");
}
