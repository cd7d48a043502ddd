//! OVER aggregates against results computed here from the events: a row that arrives
//! behind the watermark is late and dropped (it neither leaves nor counts in later rows'
//! frames), rows out of order within the watermark's bound are taken in time order, and
//! over `PROCTIME()` rows are taken as they arrive.

use crate::common::*;
use std::collections::BTreeMap;
use std::path::Path;

/// A row of the input files: (user, time in ms, value).
pub(crate) type Event = (i64, i64, i64);

/// The rows of `a.csv` and of `b.csv`, in arrival order.
fn files() -> (Vec<Event>, Vec<Event>) {
    files_with(11, 999)
}

/// The rows of `a.csv` and of `b.csv` in arrival order, drawn from `seed`. The first row
/// of `b.csv` (value `late_value`) is late; another is out of order within the bound.
pub(crate) fn files_with(seed: u64, late_value: i64) -> (Vec<Event>, Vec<Event>) {
    let mut rng = Lcg(seed);
    let start = 1_700_000_000_000i64;
    let a: Vec<_> = (0..300)
        .map(|i| (1 + rng.next(3) as i64, start + i * 100, rng.next(50) as i64))
        .collect();
    let mut b: Vec<_> = (300..600)
        .map(|i| (1 + rng.next(3) as i64, start + i * 100, rng.next(50) as i64))
        .collect();
    // Late: far behind the watermark `a.csv` left (its last time minus 2 s).
    b.insert(0, (1, start + 1_000, late_value));
    // Out of order within the bound: 1.5 s behind the row before it.
    b.insert(10, (2, start + 30_850 - 1_500, 7));
    (a, b)
}

pub(crate) fn write(dir: &Path, name: &str, rows: &[Event]) {
    let text: String = rows
        .iter()
        .map(|(u, ms, v)| format!("{u},{ms},{v}\n"))
        .collect();
    std::fs::write(dir.join(name), text).unwrap();
}

/// Runs `sql` (its `${input}` and `${out}` filled in) and returns its committed lines,
/// sorted.
pub(crate) fn run_sql(sql: &str, input: &Path, extra: &[&str]) -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let script = write_script(
        tmp.path(),
        "over.sql",
        &render(
            sql,
            &[
                ("input", input.to_str().unwrap()),
                ("out", out.to_str().unwrap()),
            ],
        ),
    );
    let mut args = vec![script.to_str().unwrap()];
    args.extend_from_slice(extra);
    run_ok(&args);
    let mut lines = committed_lines(&out);
    lines.sort();
    lines
}

/// `(time, value)` of every row but the late one (the first of `b`), per user in time
/// order.
pub(crate) fn in_time_order(a: &[Event], b: &[Event]) -> BTreeMap<i64, Vec<(i64, i64)>> {
    let late = b[0];
    let mut by_user: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    for (u, ms, v) in a.iter().chain(b).filter(|r| **r != late) {
        by_user.entry(*u).or_default().push((*ms, *v));
    }
    for rows in by_user.values_mut() {
        rows.sort_by_key(|(ms, _)| *ms);
    }
    by_user
}

#[test]
fn over_aggregates_drop_late_rows_and_take_rows_in_time_order() {
    let (a, b) = files();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    write(&input, "a.csv", &a);
    write(&input, "b.csv", &b);
    let sql = "
CREATE TABLE ev (u BIGINT, ms BIGINT, v BIGINT, ts AS TO_TIMESTAMP_LTZ(ms, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
WITH ('connector' = 'filesystem', 'path' = '${input}', 'format' = 'csv');
CREATE TABLE sums (u BIGINT, ms BIGINT, n BIGINT, s BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/sums', 'format' = 'json');
INSERT INTO sums
SELECT u, ms, COUNT(*) OVER w, SUM(v) OVER w FROM ev
WINDOW w AS (PARTITION BY u ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW);
";
    let mut expected = Vec::new();
    for (u, rows) in in_time_order(&a, &b) {
        for i in 0..rows.len() {
            let frame = &rows[i.saturating_sub(2)..=i];
            let s: i64 = frame.iter().map(|(_, v)| v).sum();
            expected.push(format!(
                "sums/ {{\"u\":{u},\"ms\":{},\"n\":{},\"s\":{s}}}",
                rows[i].0,
                frame.len()
            ));
        }
    }
    expected.sort();
    // One source subtask reads the files in order, so the late row comes after the
    // watermark of `a.csv` (two would read them side by side and hold the watermark back).
    let chk = dir.path().join("chk");
    for extra in [
        vec!["-p", "1"],
        vec![
            "-p",
            "1",
            "--checkpoint-interval",
            "20 ms",
            "--checkpoint-dir",
            chk.to_str().unwrap(),
        ],
    ] {
        let got = run_sql(sql, &input, &extra);
        assert!(
            got == expected,
            "{extra:?}: {} rows, expected {}; first difference: {:?}",
            got.len(),
            expected.len(),
            got.iter().zip(&expected).find(|(g, e)| g != e)
        );
    }
}

#[test]
fn over_aggregates_on_processing_time_take_rows_as_they_arrive() {
    let (a, _) = files();
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.csv", &a);
    let sql = "
CREATE TABLE ev (u BIGINT, ms BIGINT, v BIGINT, pt AS PROCTIME())
WITH ('connector' = 'filesystem', 'path' = '${input}', 'format' = 'csv');
CREATE TABLE counts (u BIGINT, ms BIGINT, n BIGINT, hi BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/counts', 'format' = 'json');
INSERT INTO counts
SELECT u, ms, COUNT(*) OVER w, MAX(v) OVER w FROM ev
WINDOW w AS (PARTITION BY u ORDER BY pt);
";
    let mut seen: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    let mut expected: Vec<String> = a
        .iter()
        .map(|(u, ms, v)| {
            let (n, hi) = seen.entry(*u).or_insert((0, i64::MIN));
            *n += 1;
            *hi = (*hi).max(*v);
            format!("counts/ {{\"u\":{u},\"ms\":{ms},\"n\":{n},\"hi\":{hi}}}")
        })
        .collect();
    expected.sort();
    let got = run_sql(sql, &dir.path().join("a.csv"), &["-p", "2"]);
    assert_eq!(got, expected);
}
