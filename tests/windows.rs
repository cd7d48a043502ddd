//! Event-time windows against results computed here from the events themselves: tumbling
//! windows (TVF and legacy `GROUP BY TUMBLE`) and session windows (`GROUP BY SESSION`).
//! The same events are read once in time order and once shuffled within the watermark's
//! bound (each event up to 1.5 s late, watermark `ts - 2 s`): both must give exactly the
//! expected windows, at parallelism 1 and at parallelism 2 with checkpoints.

use crate::common::*;
use std::collections::BTreeMap;
use std::path::Path;

const GAP_MS: i64 = 2000;
const SIZE_MS: i64 = 5000;

/// (user, time in ms), in time order.
fn events() -> Vec<(i64, i64)> {
    let mut state: u64 = 42;
    let mut next = |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    let mut ts = 1_700_000_000_000i64;
    (0..4000)
        .map(|_| {
            ts += next(300) as i64;
            (1 + next(20) as i64, ts)
        })
        .collect()
}

fn expected(events: &[(i64, i64)]) -> Vec<String> {
    let iso = |ms: i64| chrono_like(ms);
    let mut lines = Vec::new();
    let mut tumbles: BTreeMap<(i64, i64), (i64, i64)> = BTreeMap::new();
    let mut per_user: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (u, ts) in events {
        let start = ts - ts.rem_euclid(SIZE_MS);
        let e = tumbles.entry((*u, start)).or_default();
        e.0 += 1;
        e.1 += ts % 1000;
        per_user.entry(*u).or_default().push(*ts);
    }
    for ((u, start), (n, sum)) in &tumbles {
        lines.push(format!(
            "tumble/ {{\"u\":{u},\"window_start\":\"{}\",\"n\":{n},\"s\":{sum}}}",
            iso(*start)
        ));
        lines.push(format!(
            "legacy/ {{\"u\":{u},\"window_start\":\"{}\",\"window_end\":\"{}\",\"n\":{n}}}",
            iso(*start),
            iso(start + SIZE_MS)
        ));
    }
    for (u, times) in per_user {
        let mut times = times;
        times.sort();
        let (mut first, mut last, mut n) = (times[0], times[0], 0);
        for t in times.iter().copied().chain([i64::MAX]) {
            if t != i64::MAX && t - last <= GAP_MS {
                last = t;
                n += 1;
                continue;
            }
            lines.push(format!(
                "session/ {{\"u\":{u},\"s\":\"{}\",\"e\":\"{}\",\"n\":{n},\"first\":{first},\"last\":{last}}}",
                iso(first),
                iso(last + GAP_MS)
            ));
            (first, last, n) = (t, t, 1);
        }
    }
    lines.sort();
    lines
}

/// `2023-11-14 22:13:20.12` for epoch milliseconds (UTC), as Flink's json format writes
/// a `TIMESTAMP(3)` (the fraction without trailing zeros).
fn chrono_like(ms: i64) -> String {
    let (secs, millis) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (h, mi, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let frac = if millis == 0 {
        String::new()
    } else {
        format!(".{millis:03}").trim_end_matches('0').to_string()
    };
    format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}{frac}")
}

const SQL: &str = "
CREATE TABLE ev (u BIGINT, ms BIGINT, ts AS TO_TIMESTAMP_LTZ(ms, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
WITH ('connector' = 'filesystem', 'path' = '${input}', 'format' = 'csv');
CREATE TABLE tumble (u BIGINT, window_start TIMESTAMP(3), n BIGINT, s BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/tumble', 'format' = 'json');
CREATE TABLE legacy (u BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/legacy', 'format' = 'json');
CREATE TABLE session (u BIGINT, s TIMESTAMP(3), e TIMESTAMP(3), n BIGINT, `first` BIGINT, `last` BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/session', 'format' = 'json');

INSERT INTO tumble
SELECT u, window_start, COUNT(*), SUM(ms % 1000)
FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '5' SECOND))
GROUP BY u, window_start, window_end;

INSERT INTO legacy
SELECT u, TUMBLE_START(ts, INTERVAL '5' SECOND), TUMBLE_END(ts, INTERVAL '5' SECOND), COUNT(*)
FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '5' SECOND);

INSERT INTO session
SELECT u, SESSION_START(ts, INTERVAL '2' SECOND), SESSION_END(ts, INTERVAL '2' SECOND),
       COUNT(*), MIN(ms), MAX(ms)
FROM ev GROUP BY u, SESSION(ts, INTERVAL '2' SECOND);
";

fn run_windows(input: &Path, extra: &[&str]) -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let script = write_script(
        tmp.path(),
        "windows.sql",
        &render(
            SQL,
            &[
                ("input", input.to_str().unwrap()),
                ("out", out.to_str().unwrap()),
            ],
        ),
    );
    let mut args = vec![script.to_str().unwrap()];
    args.extend_from_slice(extra);
    run_ok(&args);
    committed_lines(&out)
}

#[test]
fn windows_match_the_events_in_order_and_out_of_order() {
    let events = events();
    let expected = expected(&events);
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, rows: &[(i64, i64)]| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(&path).unwrap();
        let mut text = String::new();
        for (u, ts) in rows {
            text.push_str(&format!("{u},{ts}\n"));
        }
        std::fs::write(path.join("events.csv"), text).unwrap();
        path
    };
    let in_order = write("in_order", &events);
    // Shuffle within the bound: each event moves behind later ones by up to 1.5 s.
    let mut state: u64 = 7;
    let mut shuffled: Vec<(i64, (i64, i64))> = events
        .iter()
        .map(|e| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
            (e.1 + ((state >> 33) % 1500) as i64, *e)
        })
        .collect();
    shuffled.sort_by_key(|(k, _)| *k);
    let shuffled: Vec<(i64, i64)> = shuffled.into_iter().map(|(_, e)| e).collect();
    assert_ne!(shuffled, events, "the shuffle moved nothing");
    let out_of_order = write("out_of_order", &shuffled);

    let chk = dir.path().join("chk");
    for (name, input, extra) in [
        ("in order, p=1", &in_order, vec!["-p", "1"]),
        ("out of order, p=1", &out_of_order, vec!["-p", "1"]),
        (
            "out of order, p=2, checkpoints",
            &out_of_order,
            vec![
                "-p",
                "2",
                "--checkpoint-interval",
                "20 ms",
                "--checkpoint-dir",
                chk.to_str().unwrap(),
            ],
        ),
    ] {
        let got = run_windows(input, &extra);
        assert!(
            got == expected,
            "{name}: {} rows, expected {}; first difference: {:?}",
            got.len(),
            expected.len(),
            got.iter().zip(&expected).find(|(a, b)| a != b)
        );
    }
}

/// A tumbling window over `PROCTIME()` in an unbounded job whose source has no watermark
/// at all: windows are emitted (and committed) while the job runs, because they fire on
/// the wall clock.
#[test]
fn processing_time_windows_fire_on_the_wall_clock() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let chk = tmp.path().join("chk");
    let script = write_script(
        tmp.path(),
        "proctime.sql",
        &render(
            "
CREATE TABLE ev (u BIGINT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '300',
  'fields.u.min' = '1', 'fields.u.max' = '3'
);
CREATE TABLE per_second (u BIGINT, n BIGINT, window_start TIMESTAMP_LTZ(3), window_end TIMESTAMP_LTZ(3))
WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');
INSERT INTO per_second
SELECT u, COUNT(*), window_start, window_end
FROM TABLE(TUMBLE(TABLE (SELECT *, PROCTIME() AS pt FROM ev), DESCRIPTOR(pt), INTERVAL '500' MILLISECOND))
GROUP BY u, window_start, window_end;
",
            &[("out", out.to_str().unwrap())],
        ),
    );
    let mut child = spawn(
        &[
            script.to_str().unwrap(),
            "-p",
            "2",
            "--checkpoint-dir",
            chk.to_str().unwrap(),
            "--checkpoint-interval",
            "100 ms",
        ],
        &[],
    );
    let started = std::time::Instant::now();
    let mut lines = Vec::new();
    while started.elapsed() < std::time::Duration::from_secs(60) {
        lines = committed_lines(&out);
        if lines.len() >= 9 {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the unbounded job ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        lines.len() >= 9,
        "windows were not emitted while the job ran: {lines:?}"
    );
    let mut seen = std::collections::HashSet::new();
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(v["n"].as_i64().unwrap() > 0, "{line}");
        assert!(
            seen.insert((v["u"].as_i64(), v["window_start"].to_string())),
            "a window was emitted twice: {line}"
        );
    }
}
