//! MATCH_RECOGNIZE against matches computed here from the events: a row that arrives
//! behind the watermark is late and dropped (it is in no match), and rows out of order
//! within the watermark's bound are matched in time order. The input files are those of
//! the OVER tests (`crate::over`), drawn from another seed.

use crate::over::{files_with, in_time_order, run_sql, write};

#[test]
fn match_recognize_drops_late_rows_and_matches_in_time_order() {
    let (a, b) = files_with(23, 0);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    write(&input, "a.csv", &a);
    write(&input, "b.csv", &b);
    // Every pair of a user's consecutive rows (in time order, the late row left out)
    // where the value rises: AFTER MATCH SKIP TO NEXT ROW (the default) lets them overlap.
    let mut expected = Vec::new();
    for (u, rows) in in_time_order(&a, &b) {
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
    // One source subtask reads the files in order, so the late row comes after the
    // watermark of `a.csv`.
    let got = run_sql(sql, &input, &["-p", "1"]);
    assert!(
        got == expected,
        "{} matches, expected {}; first difference: {:?}",
        got.len(),
        expected.len(),
        got.iter().zip(&expected).find(|(g, e)| g != e)
    );
}
