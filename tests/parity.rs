//! Regression tests for results that silently differed from Flink's, each named after the
//! difference. Every query runs in both modes: streaming (`+I[…]` lines from the print
//! sink) and batch (DataFusion's execution); both must give Flink's values.

use crate::common::*;

/// The values of the one row `select` returns, in streaming and in batch mode, as text.
fn one_row_both_modes(select: &str) -> (String, String) {
    let tmp = tempfile::tempdir().unwrap();
    let out = streaming_output(tmp.path(), select);
    let streaming_row = out
        .lines()
        .find_map(|l| l.strip_prefix("+I[")?.strip_suffix(']'))
        .unwrap_or_else(|| panic!("no row in: {out}"))
        .to_string();
    (streaming_row, batch_row(tmp.path(), select))
}

/// What the print sink writes for `select` in streaming mode (parallelism 1).
fn streaming_output(dir: &std::path::Path, select: &str) -> String {
    let script = write_script(dir, "s.sql", &format!("{select};"));
    run_ok(&[script.to_str().unwrap(), "-p", "1"])
}

/// The one row `select` returns in batch mode, as text.
fn batch_row(dir: &std::path::Path, select: &str) -> String {
    let batch = write_script(
        dir,
        "b.sql",
        &format!("SET 'execution.runtime-mode' = 'batch';\n{select};"),
    );
    let out = run_ok(&[batch.to_str().unwrap()]);
    // The pretty table: header, separator, then the row `| a | b |`.
    out.lines()
        .filter(|l| l.starts_with('|'))
        .nth(1)
        .unwrap_or_else(|| panic!("no row in: {out}"))
        .trim_matches('|')
        .split('|')
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Exact numeric literals were DOUBLEs: `0.1 + 0.2 = 0.3` was false and
/// `CAST(1.255 AS DECIMAL(4, 2))` gave 1.25. In Flink they are DECIMALs; `1E1` is a DOUBLE.
#[test]
fn exact_numeric_literals_are_decimals_as_in_flink() {
    let (streaming, batch) = one_row_both_modes(
        "SELECT 0.1 + 0.2 = 0.3, 0.1 + 0.2, CAST(1.255 AS DECIMAL(4, 2)), 1.5 * 2, 1E1",
    );
    for row in [streaming, batch] {
        assert_eq!(row, "true, 0.3, 1.26, 3.0, 10.0");
    }
}

/// `REGEXP_REPLACE` replaced only the first match, and `$1` in the replacement was a group
/// reference. Flink replaces every match with the replacement as literal text.
#[test]
fn regexp_replace_replaces_every_match_as_in_flink() {
    let (streaming, batch) = one_row_both_modes(
        "SELECT REGEXP_REPLACE('a1b22c333', '[0-9]+', '#'), \
         REGEXP_REPLACE('a1b2', '([a-z])([0-9])', '$2$1'), \
         REGEXP_EXTRACT('ab12', '([a-z]+)([0-9]+)', 0), \
         SPLIT_INDEX('a,b,,c', ',', 2) = '', SPLIT_INDEX('a,b', ',', 5) IS NULL, \
         REGEXP('x1', '[0-9]')",
    );
    for row in [streaming, batch] {
        assert_eq!(row, "a#b#c#, $2$1$2$1, ab12, true, true, true");
    }
}

/// A csv file's first row was taken for a header and dropped: Flink's csv has no header.
#[test]
fn csv_has_no_header_line_as_in_flink() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("in.csv");
    std::fs::write(&data, "1,a\n2,\n3,c\n").unwrap();
    let (streaming, batch) = one_row_both_modes(&format!(
        "CREATE TABLE t (id INT, s STRING) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
         SELECT COUNT(*), SUM(id), COUNT(s), MIN(CHAR_LENGTH(s)) FROM t",
        data.display()
    ));
    // Three rows; the empty field is an empty string, not NULL.
    for row in [streaming, batch] {
        assert_eq!(row, "3, 6, 3, 0");
    }
}

/// The values of the last row an aggregate over `select` gives: in streaming mode the last
/// `+I`/`+U` line (the final value of a one-group aggregate), in batch mode its one row.
fn final_row_both_modes(select: &str) -> (String, String) {
    let tmp = tempfile::tempdir().unwrap();
    let out = streaming_output(tmp.path(), select);
    let streaming_row = out
        .lines()
        .rev()
        .find_map(|l| {
            l.strip_prefix("+I[")
                .or_else(|| l.strip_prefix("+U["))?
                .strip_suffix(']')
        })
        .unwrap_or_else(|| panic!("no row in: {out}"))
        .to_string();
    (streaming_row, batch_row(tmp.path(), select))
}

/// `AVG` of an INT column was a DOUBLE (Flink: the column's type, truncated toward zero),
/// and `AVG(a)` beside `AVG(CAST(a AS DOUBLE))` failed with "duplicate unqualified field
/// name"; `SUM` of an INT was a BIGINT.
#[test]
fn avg_of_an_integer_column_is_an_integer_as_in_flink() {
    let (streaming, batch) = final_row_both_modes(
        "SELECT AVG(a), AVG(CAST(a AS DOUBLE)), SUM(a), AVG(-a), \
         AVG(CAST(a AS DECIMAL(10, 2))) \
         FROM (VALUES (1), (2), (2)) AS t(a)",
    );
    for row in [streaming, batch] {
        assert_eq!(row, "1, 1.6666666666666667, 5, -1, 1.666667");
    }
}

/// Decimal division kept fewer digits than Flink and truncated: Flink's scale is
/// `max(6, s1 + p2 + 1)`, rounded half up.
#[test]
fn decimal_division_has_flinks_scale_and_rounds_half_up() {
    let (streaming, batch) = one_row_both_modes(
        "SELECT 10.0 / 4, 1 / 3.0, CAST(2 AS DECIMAL(5, 2)) / 3, CAST(-2 AS DECIMAL(5, 2)) / 3, 7 / 2",
    );
    for row in [streaming, batch] {
        assert_eq!(
            row,
            "2.500000000000, 0.333333, 0.6666666666667, -0.6666666666667, 3"
        );
    }
}

/// `CAST(TRUE AS STRING)` was `true`, doubles lost Java's form (`1e20`) and timestamps had
/// a `T` and no fixed fraction; Flink writes `TRUE`, `1.0E20`, `2024-01-01 10:00:00.000`.
#[test]
fn cast_to_string_writes_values_as_flink_does() {
    let (streaming, batch) = one_row_both_modes(
        "SELECT CAST(TRUE AS STRING), CAST(1.0E20 AS STRING), CAST(0.1E0 AS STRING), \
         CAST(CAST('2024-01-01 10:00:00' AS TIMESTAMP(3)) AS STRING), \
         CAST(CAST('2024-01-01 10:00:00.5' AS TIMESTAMP(0)) AS STRING), \
         CAST(1.50 AS STRING)",
    );
    for row in [streaming, batch] {
        assert_eq!(
            row,
            "TRUE, 1.0E20, 0.1, 2024-01-01 10:00:00.000, 2024-01-01 10:00:00, 1.50"
        );
    }
}

/// A window aggregate grouped by `window_start, window_end, window_time` was planned as an
/// updating aggregate (the optimizer computes `window_end` under another name when
/// `window_time` shares it), so a second TUMBLE over its `window_time` was refused. In
/// Flink it stays an append-only window aggregate whose `window_time` is a time attribute.
#[test]
fn cascading_window_over_window_time_is_a_window_aggregate_as_in_flink() {
    let tmp = tempfile::tempdir().unwrap();
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/flink/data/orders.csv");
    let script = write_script(
        tmp.path(),
        "c.sql",
        &format!(
            "CREATE TABLE orders (order_id INT, customer STRING, product STRING, amount DECIMAL(10, 2), \
             qty INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) \
             WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
             CREATE VIEW per_customer AS SELECT window_start AS s, window_end AS e, \
             window_time AS rowtime, customer, COUNT(*) AS n \
             FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '5' MINUTES)) \
             GROUP BY window_start, window_end, window_time, customer;\n\
             SELECT window_start, SUM(n), COUNT(*) \
             FROM TABLE(TUMBLE(TABLE per_customer, DESCRIPTOR(rowtime), INTERVAL '10' MINUTES)) \
             GROUP BY window_start, window_end;",
            data.display()
        ),
    );
    let out = run_ok(&[script.to_str().unwrap(), "-p", "2"]);
    // Lines `n> +I[…]` (subtask n of the print sink).
    let mut rows: Vec<&str> = out
        .lines()
        .map(|l| l.split_once("> ").map_or(l, |(_, row)| row))
        .filter(|l| l.starts_with(['+', '-']))
        .collect();
    rows.sort();
    // Append-only: one insert per outer window (Flink's rows, tests/flink/expected).
    assert_eq!(
        rows,
        [
            "+I[2024-01-01T10:00:00, 10, 8]",
            "+I[2024-01-01T10:10:00, 6, 6]"
        ],
        "{out}"
    );
}

/// `INSERT OVERWRITE` appended and `INSERT INTO t PARTITION (…)` ignored its static
/// values. Now (their results are compared with Flink's in `flink::sink_files_are_flinks`)
/// an overwrite replaces in batch mode, is refused in streaming mode and for connectors
/// that cannot be overwritten, and a statement that fails leaves the old files.
#[test]
fn insert_overwrite_replaces_and_static_partitions_are_written() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("out");
    let ddl = format!(
        "CREATE TABLE t (id INT, dt STRING) PARTITIONED BY (dt) \
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n",
        out_dir.display()
    );
    let batch = "SET 'execution.runtime-mode' = 'batch';\n";
    let go = |name: &str, sql: String| {
        let script = write_script(tmp.path(), name, &sql);
        run(&[script.to_str().unwrap()])
    };
    let first = go(
        "first.sql",
        format!("{batch}{ddl}INSERT INTO t PARTITION (dt = 'a') VALUES (1), (2);"),
    );
    assert!(first.status.success());
    assert_eq!(committed_lines(&out_dir.join("dt=a")), ["1", "2"]);
    for (name, sql, needle) in [
        (
            "streaming.sql",
            format!("{ddl}INSERT OVERWRITE t SELECT 3, 'a';"),
            "not supported in streaming mode",
        ),
        (
            "print.sql",
            format!(
                "{batch}CREATE TABLE p (id INT) WITH ('connector' = 'print');\n\
                 INSERT OVERWRITE p SELECT 1;"
            ),
            "connector 'print' cannot be overwritten",
        ),
        (
            "column.sql",
            format!("{batch}{ddl}INSERT OVERWRITE t PARTITION (id = 1) SELECT 'a';"),
            "'id' is not a partition column",
        ),
        (
            "failing.sql",
            format!("{batch}{ddl}INSERT OVERWRITE t SELECT CAST('x' AS INT), 'a';"),
            "x",
        ),
    ] {
        let out = go(name, sql);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name} ran");
        assert!(err.contains(needle), "{name}: {err}");
        assert_eq!(
            committed_lines(&out_dir.join("dt=a")),
            ["1", "2"],
            "{name} changed the table"
        );
    }
    let replaced = go(
        "replace.sql",
        format!("{batch}{ddl}INSERT OVERWRITE t SELECT 3, 'a';"),
    );
    assert!(replaced.status.success());
    assert_eq!(committed_lines(&out_dir.join("dt=a")), ["3"]);
}

/// Flink inserts a query whose SELECT list names a column twice (`SELECT id, id`), by
/// position, in both modes; DataFusion alone refuses the list.
#[test]
fn insert_of_a_column_written_twice_runs_as_in_flink() {
    let tmp = tempfile::tempdir().unwrap();
    for mode in ["streaming", "batch"] {
        let out = tmp.path().join(mode);
        let sql = format!(
            "SET 'execution.runtime-mode' = '{mode}';
             CREATE TABLE src (id INT, name STRING) WITH ('connector' = 'datagen',
               'number-of-rows' = '3', 'fields.id.kind' = 'sequence', 'fields.id.start' = '1',
               'fields.id.end' = '3', 'fields.name.length' = '1');
             CREATE TABLE sink (a INT, b INT, c INT, d INT, e INT) WITH ('connector' = 'filesystem',
               'path' = '{}', 'format' = 'csv');
             INSERT INTO sink SELECT id, id, src.id, id + 1, id + 1 FROM src;",
            out.display()
        );
        let script = write_script(tmp.path(), &format!("{mode}.sql"), &sql);
        run_ok(&[script.to_str().unwrap(), "-p", "1"]);
        let mut rows = committed_lines(&out);
        rows.sort();
        assert_eq!(rows, ["1,1,1,2,2", "2,2,2,3,3", "3,3,3,4,4"], "{mode}");
    }
}
