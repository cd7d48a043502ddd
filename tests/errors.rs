//! Bad input gets a clear error naming what is wrong and where, and leaves no output.

use crate::common::*;

fn fails_with(sql: &str, needles: &[&str]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let s = write_script(tmp.path(), "bad.sql", sql);
    let out = run(&[s.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "expected failure for:\n{sql}");
    for n in needles {
        assert!(err.contains(n), "error message lacks '{n}':\n{err}");
    }
    assert!(!err.contains("panicked"), "panic reached the user:\n{err}");
    err
}

#[test]
fn syntax_error_names_line_and_column() {
    fails_with(
        "SET 'parallelism.default' = '1';\n\nSELECT a, FROM t;",
        &["line 3, column", "found: FROM", "bad.sql"],
    );
}

#[test]
fn unknown_connector_lists_the_valid_ones() {
    fails_with(
        "CREATE TABLE t (a INT) WITH ('connector' = 'kafka2');",
        &[
            "unknown connector 'kafka2'",
            "datagen, delta, filesystem, kafka, upsert-kafka, memory, nexmark, print, blackhole",
        ],
    );
}

#[test]
fn unknown_option_lists_the_valid_ones() {
    fails_with(
        "CREATE TABLE t (a INT) WITH ('connector' = 'datagen', 'rows-per-secnd' = '5');",
        &["unknown option 'rows-per-secnd'", "rows-per-second"],
    );
}

#[test]
fn unknown_set_key_lists_known_keys() {
    fails_with(
        "SET 'execution.checkpoint.interval' = '1 s';",
        &[
            "unknown configuration key",
            "execution.checkpointing.interval",
        ],
    );
}

#[test]
fn unknown_time_zone_is_named() {
    fails_with(
        "SET 'table.local-time-zone' = 'Mars/Olympus';",
        &[
            "'Mars/Olympus'",
            "table.local-time-zone",
            "Asia/Shanghai",
            "line 1",
        ],
    );
}

#[test]
fn unknown_column_is_a_sql_error() {
    fails_with(
        "CREATE TABLE t (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '1');\nSELECT b FROM t;",
        &["line 2", "No field named b"],
    );
}

#[test]
fn missing_input_path_is_named() {
    fails_with(
        "CREATE TABLE t (a INT) WITH ('connector' = 'filesystem', 'path' = '/no/such/dir/in', 'format' = 'csv');\nSELECT * FROM t;",
        &["/no/such/dir/in", "does not exist"],
    );
}

#[test]
fn insert_with_wrong_column_count_is_rejected() {
    fails_with(
        "CREATE TABLE s (a INT, b INT) WITH ('connector' = 'datagen', 'number-of-rows' = '1');\n\
         CREATE TABLE d (a INT) WITH ('connector' = 'blackhole');\nINSERT INTO d SELECT a, b FROM s;",
        &["returns 2 columns, the table has 1"],
    );
}

#[test]
fn insert_column_lists_are_checked() {
    let ddl = "CREATE TABLE s (a INT, b INT) WITH ('connector' = 'datagen', 'number-of-rows' = '1');\n\
               CREATE TABLE d (a INT, b INT) WITH ('connector' = 'blackhole');\n";
    fails_with(
        &format!("{ddl}INSERT INTO d (a, x) SELECT a, b FROM s;"),
        &["INSERT INTO 'd': no column 'x' (columns: a, b)", "line 3"],
    );
    fails_with(
        &format!("{ddl}INSERT INTO d (b, b) SELECT a, b FROM s;"),
        &["column 'b' is listed twice"],
    );
    fails_with(
        &format!("{ddl}INSERT INTO d (b) SELECT a, b FROM s;"),
        &["the query returns 2 columns for the 1 listed (b)"],
    );
}

#[test]
fn create_table_as_select_is_checked() {
    let src = "CREATE TABLE s (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '1');\n";
    fails_with(
        &format!(
            "{src}CREATE TABLE d (a INT) WITH ('connector' = 'blackhole') AS SELECT a FROM s;"
        ),
        &["takes its columns from the query", "line 2, column 1"],
    );
    fails_with(
        &format!("{src}CREATE TABLE d WITH ('connector' = 'blackhole') AS SELECT a + 1 FROM s;"),
        &["name column 1 ('s.a + Int64(1)') with AS", "line 2"],
    );
    fails_with(
        &format!("{src}CREATE TABLE d WITH ('connector' = 'blackhole');"),
        &["CREATE TABLE 'd': the table has no columns"],
    );
}

#[test]
fn limit_over_an_updating_query_is_explained() {
    fails_with(
        "CREATE TABLE s (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '5');\n\
         CREATE TABLE d (a INT, n BIGINT) WITH ('connector' = 'print');\n\
         INSERT INTO d SELECT a, COUNT(*) FROM s GROUP BY a LIMIT 3;",
        &["LIMIT over an updating query", "line 3"],
    );
}

/// ARRAY_AGG over a changelog is refused: DataFusion's accumulator would take back its
/// oldest value, not the retracted one.
#[test]
fn array_agg_over_an_updating_input_is_refused() {
    fails_with(
        "CREATE TABLE s (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '5');\n\
         CREATE TABLE d (n BIGINT, a ARRAY<INT>) WITH ('connector' = 'print');\n\
         INSERT INTO d SELECT n, ARRAY_AGG(a) FROM \
         (SELECT a, COUNT(*) AS n FROM s GROUP BY a) GROUP BY n;",
        &["over an updating input", "not supported yet"],
    );
}

#[test]
fn like_clauses_are_checked() {
    let src = "CREATE TABLE s (a BIGINT, b AS TO_TIMESTAMP_LTZ(a, 3), WATERMARK FOR b AS b) \
               WITH ('connector' = 'datagen', 'number-of-rows' = '1');\n";
    fails_with(
        &format!("{src}CREATE TABLE d WITH ('connector' = 'blackhole') LIKE nope;"),
        &["CREATE TABLE 'd' LIKE 'nope': no such table", "line 2"],
    );
    fails_with(
        &format!("{src}CREATE TABLE d (a STRING) LIKE s;"),
        &["column 'a' is defined in both tables"],
    );
    fails_with(
        &format!("{src}CREATE TABLE d (WATERMARK FOR b AS b) LIKE s;"),
        &["both tables define a watermark", "OVERWRITING or EXCLUDING"],
    );
    fails_with(
        &format!("{src}CREATE TABLE d WITH ('number-of-rows' = '2') LIKE s (INCLUDING OPTIONS);"),
        &["option 'number-of-rows' is set in both tables"],
    );
    fails_with(
        &format!("{src}CREATE TABLE d LIKE s (OVERWRITING ALL);"),
        &[
            "OVERWRITING applies to GENERATED, OPTIONS, WATERMARKS and METADATA only",
            "line 2",
        ],
    );
}

#[test]
fn with_before_insert_names_the_order_that_works() {
    fails_with(
        "CREATE TABLE s (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '1');\n\
         CREATE TABLE d (a INT) WITH ('connector' = 'blackhole');\n\
         WITH x AS (SELECT a FROM s) INSERT INTO d SELECT a FROM x;",
        &["write INSERT INTO t WITH … SELECT", "line 3, column 1"],
    );
}

#[test]
fn unwritable_sink_path_fails_before_any_data_moves() {
    fails_with(
        "CREATE TABLE s (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '10');\n\
         CREATE TABLE d (a INT) WITH ('connector' = 'filesystem', 'path' = '/dev/null/out', 'format' = 'csv');\n\
         INSERT INTO d SELECT a FROM s;",
        &["/dev/null/out"],
    );
}

/// Without periodic checkpoints a job commits once, when it has ended. Here subtask 1 ends
/// (after b.json) while subtask 0 still has c.json, whose bad record fails the job: a
/// checkpoint taken when subtask 1 ended would commit a.json's and b.json's rows.
#[test]
fn a_failure_after_a_sibling_subtask_ended_commits_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir(&input).unwrap();
    // Files go to subtasks in name order: a and c to subtask 0, b to subtask 1.
    std::fs::write(input.join("a.json"), "{\"a\": 1}\n{\"a\": 2}\n").unwrap();
    std::fs::write(input.join("b.json"), "{\"a\": 3}\n").unwrap();
    std::fs::write(input.join("c.json"), "{\"a\": \"not a number\"}\n").unwrap();
    let out = tmp.path().join("out");
    let script = write_script(
        tmp.path(),
        "job.sql",
        &format!(
            "SET 'parallelism.default' = '2';\n\
             CREATE TABLE s (a BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');\n\
             CREATE TABLE d (a BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');\n\
             INSERT INTO d SELECT a FROM s;",
            input.display(),
            out.display()
        ),
    );
    // Each file read waits, so subtask 1 has ended well before c.json is read.
    let child = spawn(
        &[script.to_str().unwrap()],
        &[("WEIR_FAILPOINTS", "before-file-read=sleep:700")],
    );
    let done = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(!done.status.success() && err.contains("c.json"), "{err}");
    assert_eq!(
        committed_lines(&out),
        Vec::<String>::new(),
        "partial output is visible"
    );
}

#[test]
fn corrupt_input_file_fails_the_job_and_commits_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir(&input).unwrap();
    std::fs::write(input.join("a.json"), "{\"a\": 1}\n{\"a\": 2}\n").unwrap();
    std::fs::write(
        input.join("b.json"),
        "{\"a\": 3}\n{\"a\": \"not a number\"}\n",
    )
    .unwrap();
    let out = tmp.path().join("out");
    let sql = format!(
        "CREATE TABLE s (a BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');\n\
         CREATE TABLE d (a BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');\n\
         INSERT INTO d SELECT a FROM s;",
        input.display(),
        out.display()
    );
    let err = fails_with(&sql, &["b.json"]);
    assert!(
        committed_lines(&out).is_empty(),
        "partial output is visible after: {err}"
    );
}

#[test]
fn misused_session_window_tvf_is_explained() {
    let ddl = "CREATE TABLE t (k BIGINT, ts AS TO_TIMESTAMP_LTZ(k, 3), WATERMARK FOR ts AS ts) \
               WITH ('connector' = 'datagen', 'number-of-rows' = '5');\n";
    let session = "TABLE(SESSION(TABLE t PARTITION BY k, DESCRIPTOR(ts), INTERVAL '1' SECOND))";
    fails_with(
        &format!("{ddl}SELECT * FROM {session};"),
        &["line 2, column 1", "GROUP BY window_start, window_end"],
    );
    fails_with(
        &format!(
            "{ddl}SELECT window_start, COUNT(*) FROM {session} GROUP BY window_start, window_end;"
        ),
        &["PARTITION BY column k must also be a GROUP BY key"],
    );
    fails_with(
        &format!(
            "{ddl}SELECT window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE t PARTITION BY k, \
             DESCRIPTOR(ts), INTERVAL '1' SECOND)) GROUP BY window_start, window_end;"
        ),
        &["TUMBLE: PARTITION BY is supported by the SESSION window TVF only"],
    );
}

#[test]
fn monitored_folder_options_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let table = |interval: &str| {
        format!(
            "CREATE TABLE t (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', \
             'format' = 'csv', 'source.monitor-interval' = '{interval}');\n",
            tmp.path().display()
        )
    };
    fails_with(
        &format!("{}SELECT * FROM t;", table("soon")),
        &["invalid 'source.monitor-interval' 'soon'", "table 't'"],
    );
    fails_with(
        &format!(
            "SET 'execution.runtime-mode' = 'batch';\n{}SELECT * FROM t;",
            table("1 s")
        ),
        &["table 't' is unbounded", "remove 'source.monitor-interval'"],
    );
}

#[test]
fn malformed_statement_sets_are_named() {
    let ddl = "CREATE TABLE s (a INT) WITH ('connector' = 'datagen', 'number-of-rows' = '1');\n\
               CREATE TABLE d (a INT) WITH ('connector' = 'blackhole');\n";
    fails_with(
        &format!(
            "{ddl}EXECUTE STATEMENT SET BEGIN\n  INSERT INTO d SELECT a FROM s;\n  SELECT a FROM s;\nEND;"
        ),
        &[
            "a STATEMENT SET holds only INSERT INTO statements",
            "line 5, column 3",
        ],
    );
    fails_with(
        &format!("{ddl}BEGIN STATEMENT SET;\nINSERT INTO d SELECT a FROM s;\n"),
        &["not closed with END", "line 3, column 1"],
    );
    fails_with(
        &format!("{ddl}EXECUTE STATEMENT SET BEGIN END;"),
        &["an INSERT INTO statement before END", "line 3"],
    );
}

/// Mistakes that used to pass silently (or surface only when the table was used) are
/// errors at `CREATE TABLE`: the scripts below declare tables and use none of them.
#[test]
fn table_mistakes_are_errors_at_create_table() {
    fails_with(
        "CREATE TABLE t (\n  a INT,\n  b STRING,\n  a BIGINT\n) WITH ('connector' = 'datagen');",
        &["declares column 'a' twice", "line 4, column 3"],
    );
    fails_with(
        "CREATE TABLE t (a INT) WITH ('connector' = 'filesystem', 'path' = '/tmp/x', 'format' = 'cvs');",
        &["unknown format 'cvs'", "parquet, csv, json"],
    );
    fails_with(
        "CREATE TABLE t (k INT) WITH ('connector' = 'datagen', 'fields.k.min' = '10', 'fields.k.max' = '0');",
        &["'fields.k.min' (10) is greater than 'fields.k.max' (0)"],
    );
}

#[test]
fn window_sizes_must_be_positive() {
    let table = "CREATE TABLE t (ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen', 'number-of-rows' = '10');\n";
    for (window, needle) in [
        (
            "TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '-10' SECOND)",
            "TUMBLE: the window size must be positive",
        ),
        (
            "TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '0' SECOND)",
            "TUMBLE: the window size must be positive",
        ),
        (
            "HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '-10' SECOND)",
            "must be a positive multiple",
        ),
    ] {
        fails_with(
            &format!(
                "{table}SELECT window_start, COUNT(*) FROM TABLE({window}) GROUP BY window_start, window_end;"
            ),
            &[needle],
        );
    }
}

/// A Parquet column that does not hold the declared type is an error naming the file and
/// the column, not a column of NULLs.
#[test]
fn parquet_column_of_another_type_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let write = write_script(
        tmp.path(),
        "write.sql",
        &format!(
            "CREATE TABLE g (id BIGINT, s STRING) WITH ('connector' = 'datagen', 'number-of-rows' = '20', 'fields.s.length' = '6');\n\
             CREATE TABLE p (id BIGINT, s STRING) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'parquet');\n\
             INSERT INTO p SELECT id, s FROM g;",
            data.display()
        ),
    );
    run_ok(&[write.to_str().unwrap()]);
    let out = tmp.path().join("out");
    let err = fails_with(
        &format!(
            "CREATE TABLE p (id BIGINT, s BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'parquet');\n\
             CREATE TABLE d (s BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
             INSERT INTO d SELECT s FROM p;",
            data.display(),
            out.display()
        ),
        &[
            "column 's' has type Utf8 and cannot be read as Int64",
            data.to_str().unwrap(),
        ],
    );
    assert!(committed_lines(&out).is_empty(), "output after: {err}");
}

/// A value a row cannot take (a failed cast, a division by zero) names the expression,
/// in streaming and batch mode, and commits nothing.
#[test]
fn data_errors_name_the_expression() {
    let tmp = tempfile::tempdir().unwrap();
    for (mode, query, needles) in [
        (
            "streaming",
            "SELECT CAST(s AS INT) FROM g",
            &["Cannot cast string", "CAST(s AS Int32)", "column 'g.s'"][..],
        ),
        (
            "batch",
            "SELECT CAST(s AS INT) FROM g",
            &["Cannot cast string", "CAST(g.s AS Int32)"][..],
        ),
        (
            "streaming",
            "SELECT id / k FROM g",
            &["division by zero", "id / CAST(k AS Int64)"][..],
        ),
        (
            "batch",
            "SELECT id / k FROM g",
            &["division by zero", "g.id / CAST(g.k AS Int64)"][..],
        ),
    ] {
        let out = tmp.path().join(format!("out-{mode}-{}", query.len()));
        let err = fails_with(
            &format!(
                "SET 'execution.runtime-mode' = '{mode}';\n\
                 CREATE TABLE g (id BIGINT, k INT, s STRING) WITH ('connector' = 'datagen', 'number-of-rows' = '50', 'fields.k.min' = '0', 'fields.k.max' = '0', 'fields.s.length' = '5');\n\
                 CREATE TABLE d (x BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
                 INSERT INTO d {query};",
                out.display()
            ),
            needles,
        );
        assert!(committed_lines(&out).is_empty(), "output after: {err}");
    }
}

/// A bad record is named by file and line (counted from 1, as an editor does).
#[test]
fn bad_records_are_named_by_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("bad.csv"), "1,a\n2,b\nx,c\n4,d\n").unwrap();
    std::fs::write(
        tmp.path().join("bad.json"),
        "{\"id\": 1}\n\n{\"id\": 2}\n{\"id\": \"zz\"}\n",
    )
    .unwrap();
    for (file, format, needle) in [
        ("bad.csv", "csv", "line 3, column 'id'"),
        ("bad.json", "json", "line 4:"),
    ] {
        let path = tmp.path().join(file);
        fails_with(
            &format!(
                "CREATE TABLE s (id BIGINT{}) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = '{format}');\n\
                 CREATE TABLE d (id BIGINT) WITH ('connector' = 'blackhole');\n\
                 INSERT INTO d SELECT id FROM s;",
                if format == "csv" { ", name STRING" } else { "" },
                path.display()
            ),
            &[&format!("cannot read '{}'", path.display()), needle],
        );
    }
}

#[test]
fn missing_script_shows_the_os_cause() {
    let out = run(&["/no/such/script.sql"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("cannot read '/no/such/script.sql'")
            && err.contains("No such file or directory"),
        "{err}"
    );
}

#[test]
fn flink_function_syntax_errors_name_line_and_column() {
    let batch = "SET 'execution.runtime-mode' = 'batch';\n";
    fails_with(
        &format!("{batch}SELECT\n  JSON_VALUE('{{}}', '$.a' RETURNING BIGINT) AS a;"),
        &[
            "line 3, column 36",
            "Unsupported type 'BIGINT' for RETURNING",
        ],
    );
    fails_with(
        &format!("{batch}SELECT MAP['a'] AS m;"),
        &["line 2, column 12", "MAP[…] takes keys and values in pairs"],
    );
    fails_with(
        &format!("{batch}SELECT JSON_OBJECT('a' 1) AS o;"),
        &["line 2, column 24", "VALUE after the JSON_OBJECT key"],
    );
}

#[test]
fn flink_function_runtime_errors_name_the_function() {
    let batch = "SET 'execution.runtime-mode' = 'batch';\n";
    fails_with(
        &format!("{batch}SELECT ELEMENT(ARRAY[1, 2]) AS e;"),
        &["ELEMENT: the array has more than one element"],
    );
    fails_with(
        &format!("{batch}SELECT JSON_VALUE('{{\"a\": \"2\"}}', '$.a' RETURNING INT) AS a;"),
        &["JSON_VALUE", "JSON string \"2\""],
    );
    fails_with(
        &format!("{batch}SELECT ENCODE('x', 'EBCDIC') AS e;"),
        &["unsupported charset 'EBCDIC'", "UTF-8"],
    );
}

#[test]
fn flink_statements_weir_refuses_say_why() {
    fails_with(
        "SET 'parallelism.default' = '1';\n  LOAD MODULE hive;",
        &["line 2, column 3", "LOAD/UNLOAD MODULE", "no module system"],
    );
    fails_with(
        "ADD JAR '/tmp/udf.jar';",
        &["line 1, column 1", "cannot load JARs"],
    );
    fails_with(
        "CREATE FUNCTION f AS 'com.example.Nope';",
        &["no function named 'Nope'", "Engine::register_udf"],
    );
    fails_with(
        "CREATE FUNCTION f AS 'f' LANGUAGE PYTHON;",
        &["line 1, column 35", "cannot run Python functions"],
    );
}

#[test]
fn unsupported_flink_syntax_is_named() {
    fails_with(
        "SELECT 1;\nALTER TABLE t MODIFY a BIGINT;",
        &[
            "line 2, column 15",
            "ALTER TABLE … MODIFY is not supported yet",
        ],
    );
}

/// MATCH_RECOGNIZE forms Flink refuses are refused with Flink's reason.
#[test]
fn match_recognize_misuse_is_named() {
    let table = "CREATE TABLE t (a INT, p INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) \
                 WITH ('connector' = 'datagen', 'number-of-rows' = '10');\n";
    let query = |order: &str, rows: &str, pattern: &str, define: &str| {
        format!(
            "{table}SELECT * FROM t MATCH_RECOGNIZE (ORDER BY {order} MEASURES A.p AS x \
             {rows} PATTERN ({pattern}) DEFINE {define});"
        )
    };
    for (sql, needles) in [
        (
            query("ts", "ALL ROWS PER MATCH", "A B", "A AS A.p > 1"),
            &["ALL ROWS PER MATCH is not supported"][..],
        ),
        (
            query("ts", "", "A B+", "A AS A.p > 1"),
            &["greedy quantifiers are not allowed as the last element"][..],
        ),
        (
            query("ts", "", "A B", "B AS B.p > PREV(B.p)"),
            &["physical offsets within partition"][..],
        ),
        (
            query("p", "", "A B", "A AS A.p > 1"),
            &["ORDER BY 'p'", "must be a time attribute"][..],
        ),
        (
            query("ts", "", "A B", "C AS C.p > 1"),
            &["'C' is not a variable of the pattern"][..],
        ),
    ] {
        fails_with(&sql, needles);
    }
}

/// Misused UNNEST is named with what to write instead.
#[test]
fn misused_unnest_is_named() {
    let table = "CREATE TABLE t (id INT, s STRING) WITH ('connector' = 'datagen', 'number-of-rows' = '10');\n";
    for (query, needles) in [
        (
            "SELECT x FROM t CROSS JOIN UNNEST(SPLIT(t.s, ','));",
            &["line 2, column 1", "name UNNEST's columns", "AS u(x)"][..],
        ),
        (
            "SELECT x FROM t CROSS JOIN UNNEST(t.s) AS u(x);",
            &["UNNEST expands an array or a map, not Utf8"][..],
        ),
        (
            "SELECT x FROM t JOIN t AS t2 ON t.id = t2.id CROSS JOIN UNNEST(SPLIT(t.s, ',')) AS u(x);",
            &["UNNEST must directly follow the table whose column it expands"][..],
        ),
        (
            "SELECT x FROM t RIGHT JOIN UNNEST(SPLIT(t.s, ',')) AS u(x) ON TRUE;",
            &["CROSS JOIN, JOIN … ON TRUE or LEFT JOIN … ON TRUE"][..],
        ),
    ] {
        fails_with(&format!("{table}{query}"), needles);
    }
}

/// A legacy group window cannot be a grouping set's expression: the error says to use a
/// window TVF.
#[test]
fn group_windows_in_grouping_sets_are_refused() {
    fails_with(
        "CREATE TABLE t (k INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) \
         WITH ('connector' = 'datagen', 'number-of-rows' = '5');\n\
         SELECT k, COUNT(*) FROM t GROUP BY GROUPING SETS ((k, TUMBLE(ts, INTERVAL '1' SECOND)), ());",
        &[
            "line 2, column 1",
            "cannot be combined with grouping sets",
            "GROUP BY window_start, window_end, GROUPING SETS",
        ],
    );
}

#[test]
fn json_missing_fields_fail_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("in.json");
    std::fs::write(&data, "{\"id\": 1, \"v\": 2}\n{\"id\": 2}\n").unwrap();
    fails_with(
        &format!(
            "CREATE TABLE m (id INT, v INT) WITH ('connector' = 'filesystem', 'path' = '{}', \
             'format' = 'json', 'json.fail-on-missing-field' = 'true');\nSELECT * FROM m;",
            data.display()
        ),
        &["in.json", "line 2: field 'v' is missing"],
    );
}

#[test]
fn ignored_parse_errors_are_counted_and_named() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("in.csv");
    let out_dir = tmp.path().join("out");
    std::fs::write(&data, "1,10\nx,20\n3,30,4\n4,40\n").unwrap();
    let s = write_script(
        tmp.path(),
        "lenient.sql",
        &format!(
            "CREATE TABLE b (id INT, v INT) WITH ('connector' = 'filesystem', 'path' = '{}', \
             'format' = 'csv', 'csv.ignore-parse-errors' = 'true');\n\
             CREATE TABLE o (id INT, v INT) WITH ('connector' = 'filesystem', 'path' = '{}', \
             'format' = 'csv');\nINSERT INTO o SELECT * FROM b;",
            data.display(),
            out_dir.display()
        ),
    );
    let out = run(&[s.to_str().unwrap(), "-p", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let mut rows = committed_lines(&out_dir);
    rows.sort();
    assert_eq!(rows, [",20", "1,10", "4,40"]);
    for needle in [
        "in.csv",
        "skipped 2",
        "first: line 2, column 'id': cannot parse 'x' as INT",
    ] {
        assert!(
            stderr.contains(needle),
            "stderr lacks '{needle}':\n{stderr}"
        );
    }
}

#[test]
fn metadata_column_mistakes_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("in.csv");
    std::fs::write(&data, "1\n").unwrap();
    let table = |column: &str| {
        format!(
            "CREATE TABLE t (id INT, {column}) WITH ('connector' = 'filesystem', 'path' = '{}', \
             'format' = 'csv');\n",
            data.display()
        )
    };
    fails_with(
        &format!(
            "{}SELECT * FROM t;",
            table("f STRING METADATA FROM 'file.owner' VIRTUAL")
        ),
        &[
            "column 'f' reads unknown metadata 'file.owner'",
            "file.path, file.name, file.size, file.modification-time",
        ],
    );
    fails_with(
        &format!(
            "{}INSERT INTO t SELECT 1, 'x';",
            table("f STRING METADATA FROM 'file.name'")
        ),
        &[
            "column 'f' is METADATA FROM 'file.name'",
            "declare it VIRTUAL",
        ],
    );
    fails_with(
        "CREATE TABLE g (id INT, f STRING METADATA VIRTUAL) WITH ('connector' = 'datagen', \
         'number-of-rows' = '1');\nSELECT * FROM g;",
        &["connector 'datagen' has no metadata"],
    );
}

/// An ARRAY field of a csv file whose element does not parse is an error naming line and
/// column (it became an array holding a NULL), and NULL with `csv.ignore-parse-errors`.
#[test]
fn csv_array_elements_that_do_not_parse_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("in.csv");
    std::fs::write(&data, "1,1;2\n2,1;x\n").unwrap();
    let table = |lenient: bool| {
        format!(
            "SET 'execution.runtime-mode' = 'batch';\n\
             CREATE TABLE a (id INT, arr ARRAY<INT>) WITH ('connector' = 'filesystem', \
             'path' = '{}', 'format' = 'csv', 'csv.ignore-parse-errors' = '{lenient}');\n\
             SELECT id, arr IS NULL AS missing FROM a;",
            data.display()
        )
    };
    fails_with(
        &table(false),
        &[
            "in.csv",
            "line 2, column 'arr': cannot parse '1;x' as ARRAY<INT>",
        ],
    );
    let s = write_script(tmp.path(), "lenient.sql", &table(true));
    let out = run(&[s.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    let rows: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with("| "))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        rows,
        ["| id | missing |", "| 1 | false |", "| 2 | true |"],
        "{stdout}"
    );
}

#[test]
fn over_windows_streaming_cannot_run_are_refused_clearly() {
    let table = "CREATE TABLE t (k INT, v INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) \
                 WITH ('connector' = 'datagen', 'number-of-rows' = '5');\n";
    for (query, wanted) in [
        (
            "SELECT k, SUM(v) OVER (PARTITION BY k ORDER BY v) FROM t;",
            "must be defined on a time attribute ascending",
        ),
        (
            "SELECT k, SUM(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN CURRENT ROW AND 2 FOLLOWING) FROM t;",
            "not CURRENT ROW",
        ),
        (
            "SELECT k, SUM(v) OVER (PARTITION BY k) FROM t;",
            "an OVER window without ORDER BY",
        ),
        (
            "SELECT k, n, SUM(n) OVER (PARTITION BY k ORDER BY ts) FROM \
             (SELECT k, MAX(ts) AS ts, COUNT(*) AS n FROM t GROUP BY k);",
            "time attribute",
        ),
        (
            "SELECT k, RANK() OVER (PARTITION BY k ORDER BY ts) FROM t;",
            "RANK() OVER (…) without a filter on its rank",
        ),
    ] {
        fails_with(&format!("{table}{query}"), &["line 2, column 1", wanted]);
    }
}

#[test]
fn temporal_joins_streaming_cannot_run_are_refused_clearly() {
    let tables = "CREATE TABLE o (k INT, ts TIMESTAMP(3), pt AS PROCTIME(), WATERMARK FOR ts AS ts) \
                  WITH ('connector' = 'datagen', 'number-of-rows' = '5');\n\
                  CREATE TABLE v (k INT, x INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts, \
                  PRIMARY KEY (k) NOT ENFORCED) \
                  WITH ('connector' = 'datagen', 'number-of-rows' = '5');\n\
                  CREATE TABLE nokey (k INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) \
                  WITH ('connector' = 'datagen', 'number-of-rows' = '5');\n";
    for (query, wanted) in [
        (
            "SELECT * FROM o JOIN nokey FOR SYSTEM_TIME AS OF o.ts AS n ON o.k = n.k;",
            "requires primary key in versioned table",
        ),
        (
            "SELECT * FROM o JOIN v FOR SYSTEM_TIME AS OF o.ts ON o.k = v.x;",
            "primary key (k) must be in the temporal join's equality condition",
        ),
        (
            "SELECT * FROM o FULL JOIN v FOR SYSTEM_TIME AS OF o.ts ON o.k = v.k;",
            "a temporal join is a JOIN or LEFT JOIN",
        ),
    ] {
        fails_with(&format!("{tables}{query}"), &["line 4, column 1", wanted]);
    }
    // A lookup join reads a table whole; an aggregate is not one.
    fails_with(
        &format!(
            "{tables}CREATE VIEW counts AS SELECT k, COUNT(*) AS n FROM v GROUP BY k;\n\
             SELECT * FROM o JOIN counts FOR SYSTEM_TIME AS OF o.pt AS c ON o.k = c.k;"
        ),
        &[
            "line 5, column 1",
            "a lookup join (FOR SYSTEM_TIME AS OF a PROCTIME()) reads a table",
        ],
    );
}
