//! MATCH_RECOGNIZE against matches computed here from the events: a row that arrives
//! behind the watermark is late and dropped (it is in no match), and rows out of order
//! within the watermark's bound are matched in time order.

use crate::common::*;
use std::collections::BTreeMap;

/// A row of the input files: (user, time in ms, value).
type Event = (i64, i64, i64);

/// The rows of `a.csv` and of `b.csv` in arrival order. The first
/// row of `b.csv` is late (far behind the watermark `a.csv` left); another is 1.5 s out of
/// order, within the watermark's 2 s bound.
fn files() -> (Vec<Event>, Vec<Event>) {
    let mut rng = Lcg(23);
    let start = 1_700_000_000_000i64;
    let mut row = |i: i64| (1 + rng.next(3) as i64, start + i * 100, rng.next(50) as i64);
    let a: Vec<_> = (0..300).map(&mut row).collect();
    let mut b: Vec<_> = (300..600).map(&mut row).collect();
    b.insert(0, (1, start + 1_000, 0));
    b.insert(10, (2, start + 30_850 - 1_500, 7));
    (a, b)
}

#[test]
fn match_recognize_drops_late_rows_and_matches_in_time_order() {
    let (a, b) = files();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    for (name, rows) in [("a.csv", &a), ("b.csv", &b)] {
        let text: String = rows
            .iter()
            .map(|(u, ms, v)| format!("{u},{ms},{v}\n"))
            .collect();
        std::fs::write(input.join(name), text).unwrap();
    }
    // Every pair of a user's consecutive rows (in time order, the late row left out)
    // where the value rises: AFTER MATCH SKIP TO NEXT ROW (the default) lets them overlap.
    let late = b[0];
    let mut by_user: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    for (u, ms, v) in a.iter().chain(&b).filter(|r| **r != late) {
        by_user.entry(*u).or_default().push((*ms, *v));
    }
    let mut expected = Vec::new();
    for (u, rows) in &mut by_user {
        rows.sort_by_key(|(ms, _)| *ms);
        for w in rows.windows(2) {
            if w[1].1 > w[0].1 {
                expected.push(format!(
                    "{{\"u\":{u},\"a_ms\":{},\"b_ms\":{}}}",
                    w[0].0, w[1].0
                ));
            }
        }
    }
    expected.sort();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let sql = "
CREATE TABLE ev (u BIGINT, ms BIGINT, v BIGINT, ts AS TO_TIMESTAMP_LTZ(ms, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
WITH ('connector' = 'filesystem', 'path' = '${input}', 'format' = 'csv');
CREATE TABLE rises (u BIGINT, a_ms BIGINT, b_ms BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');
INSERT INTO rises
SELECT * FROM ev MATCH_RECOGNIZE (
  PARTITION BY u ORDER BY ts
  MEASURES A.ms AS a_ms, B.ms AS b_ms
  PATTERN (A B)
  DEFINE B AS B.v > A.v
);
";
    let script = write_script(
        tmp.path(),
        "rises.sql",
        &render(
            sql,
            &[
                ("input", input.to_str().unwrap()),
                ("out", out.to_str().unwrap()),
            ],
        ),
    );
    // One source subtask reads the files in order, so the late row comes after the
    // watermark of `a.csv`.
    run_ok(&[script.to_str().unwrap(), "-p", "1"]);
    let mut got = committed_lines(&out);
    got.sort();
    assert!(
        got == expected,
        "{} matches, expected {}; first difference: {:?}",
        got.len(),
        expected.len(),
        got.iter().zip(&expected).find(|(g, e)| g != e)
    );
}
