//! Batch mode: bounded queries on DataFusion's execution, including what streaming mode
//! does not run (ORDER BY), written through the two-phase-commit sinks.

use crate::common::*;

const SQL: &str = "
CREATE TABLE src (id BIGINT, k AS id % 4) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000000000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '10000'
);
CREATE TABLE totals (k BIGINT, n BIGINT, s BIGINT) WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'csv');
INSERT INTO totals SELECT k, COUNT(*), SUM(id) FROM src GROUP BY k;
";

#[test]
fn batch_aggregate_commits_the_exact_totals() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let s = write_script(
        tmp.path(),
        "job.sql",
        &render(SQL, &[("out", out.to_str().unwrap())]),
    );
    run_ok(&[s.to_str().unwrap(), "--mode", "batch"]);
    let mut expected: Vec<String> = (0..4)
        .map(|k| {
            let ids: Vec<i64> = (1..=10000).filter(|i| i % 4 == k).collect();
            format!("{k},{},{}", ids.len(), ids.iter().sum::<i64>())
        })
        .collect();
    expected.sort();
    assert_eq!(committed_lines(&out), expected);
}

#[test]
fn updating_aggregate_into_an_append_only_file_is_rejected_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let s = write_script(
        tmp.path(),
        "job.sql",
        &render(SQL, &[("out", out.to_str().unwrap())]),
    );
    let result = run(&[s.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(!result.status.success());
    assert!(
        err.contains("line 7")
            && err.contains("table 'totals'")
            && err.contains("GroupAggregate")
            && err.contains("debezium-json"),
        "{err}"
    );
    assert!(committed_lines(&out).is_empty());
}

#[test]
fn batch_mode_rejects_unbounded_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let s = write_script(
        tmp.path(),
        "job.sql",
        "CREATE TABLE s (a INT) WITH ('connector' = 'datagen');\nSELECT a FROM s;",
    );
    let result = run(&[s.to_str().unwrap(), "--mode", "batch"]);
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(!result.status.success());
    assert!(err.contains("table 's' is unbounded"), "{err}");
}

/// Batch mode reads local Parquet folders with DataFusion's own Parquet scan: the table's
/// computed columns are computed on top, and hidden (pending) files are not read.
#[test]
fn batch_reads_parquet_folders_natively_with_computed_columns() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let write = write_script(
        tmp.path(),
        "write.sql",
        &format!(
            "CREATE TABLE src (id BIGINT, v INT) WITH ('connector' = 'datagen', 'number-of-rows' = '1000',
               'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '1000',
               'fields.v.min' = '1', 'fields.v.max' = '9');
             CREATE TABLE t (id BIGINT, v INT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'parquet');
             INSERT INTO t SELECT * FROM src;",
            data.display()
        ),
    );
    run_ok(&[write.to_str().unwrap(), "-p", "2"]);
    // An uncommitted part of a crashed attempt: not valid Parquet, and hidden.
    std::fs::write(data.join(".part-x-0-0.parquet.pending"), b"not parquet").unwrap();
    let out = tmp.path().join("out");
    let read = write_script(
        tmp.path(),
        "read.sql",
        &format!(
            "CREATE TABLE t (id BIGINT, v INT, w AS v * 2) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'parquet');
             CREATE TABLE totals (n BIGINT, ids BIGINT, ws BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
             INSERT INTO totals SELECT COUNT(*), SUM(id), SUM(w) - 2 * SUM(v) FROM t;",
            data.display(),
            out.display()
        ),
    );
    run_ok(&[read.to_str().unwrap(), "--mode", "batch"]);
    assert_eq!(committed_lines(&out), vec!["1000,500500,0"]);
}

/// `CREATE TABLE src (id BIGINT)` holding the ids 1 to `n`.
fn sequence_src(n: u32) -> String {
    format!(
        "CREATE TABLE src (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '{n}', \
         'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '{n}');\n"
    )
}

/// Runs the script `sql(out)` in streaming and in batch mode (with `args`), each writing
/// into its own `out`; gives, per mode, what it printed and the committed lines but the
/// CSV `header`.
fn in_both_modes(
    args: &[&str],
    header: &str,
    sql: impl Fn(&std::path::Path) -> String,
) -> Vec<(&'static str, String, Vec<String>)> {
    let tmp = tempfile::tempdir().unwrap();
    ["streaming", "batch"]
        .into_iter()
        .map(|mode| {
            let out = tmp.path().join(mode);
            let s = write_script(tmp.path(), "job.sql", &sql(&out));
            let mut full = vec![s.to_str().unwrap(), "--mode", mode];
            full.extend(args);
            let printed = run_ok(&full);
            let mut rows = committed_lines(&out);
            rows.retain(|l| l != header);
            (mode, printed, rows)
        })
        .collect()
}

/// `INSERT INTO t (c, a) …` writes the listed columns from the query and NULL to the
/// others, in both modes.
#[test]
fn insert_with_a_column_list_fills_the_other_columns_with_null() {
    let runs = in_both_modes(&[], "a,b,c", |out| {
        format!(
            "{}CREATE TABLE d (a BIGINT, b STRING, c INT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
             INSERT INTO d (c, a) SELECT id * 10, id FROM src;",
            sequence_src(3),
            out.display()
        )
    });
    for (mode, _, rows) in runs {
        assert_eq!(rows, ["1,,10", "2,,20", "3,,30"], "{mode}");
    }
}

/// `CREATE TABLE t WITH (…) AS SELECT …` creates the table with the query's columns and
/// fills it, in both modes.
#[test]
fn create_table_as_select_takes_the_query_columns() {
    let runs = in_both_modes(&[], "id,twice,label", |out| {
        format!(
            "{}CREATE TABLE d WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')\n\
             AS SELECT id, id * 2 AS twice, CONCAT('n', CAST(id AS STRING)) AS label FROM src;\n\
             DESCRIBE d;",
            sequence_src(3),
            out.display()
        )
    });
    for (mode, described, rows) in runs {
        for column in ["| id ", "| twice ", "| label "] {
            assert!(described.contains(column), "{described}");
        }
        assert_eq!(rows, ["1,2,n1", "2,4,n2", "3,6,n3"], "{mode}");
    }
}

/// A streaming `LIMIT … OFFSET …` at parallelism 1 passes on the rows in arrival order;
/// batch mode (DataFusion) gives the same rows.
#[test]
fn limit_and_offset_in_both_modes() {
    let runs = in_both_modes(&["-p", "1"], "id", |out| {
        format!(
            "{}CREATE TABLE d (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
             INSERT INTO d SELECT id FROM src WHERE id % 2 = 0 LIMIT 5 OFFSET 2;",
            sequence_src(100),
            out.display()
        )
    });
    for (mode, _, rows) in runs {
        let mut ids: Vec<u64> = rows.iter().map(|l| l.parse().unwrap()).collect();
        ids.sort();
        assert_eq!(ids, [6, 8, 10, 12, 14], "{mode}");
    }
}

/// `INSERT INTO t VALUES …` and `VALUES` as a derived table, in both modes.
#[test]
fn values_in_both_modes() {
    let runs = in_both_modes(&[], "id,name,price", |out| {
        format!(
            "CREATE TABLE d (id INT, name STRING, price DECIMAL(10, 2)) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
             INSERT INTO d VALUES (1, 'apple', 1.5), (2, 'pear', NULL), (3, CONCAT('ki', 'wi'), 2 * 3.25);\n\
             INSERT INTO d SELECT x, y, 0 FROM (VALUES (4, 'fig'), (5, 'lime')) AS t(x, y) WHERE x > 4;",
            out.display()
        )
    });
    for (mode, _, rows) in runs {
        assert_eq!(
            rows,
            ["1,apple,1.5", "2,pear,", "3,kiwi,6.5", "5,lime,0"],
            "{mode}"
        );
    }
}

const SPILL_SQL: &str = "
SET 'taskmanager.memory.managed.size' = '${limit}';
SET 'io.tmp.dirs' = '${tmp}';
CREATE TABLE src (id BIGINT, pad STRING) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000000000', 'number-of-rows' = '1000000',
  'fields.id.min' = '0', 'fields.id.max' = '1000000000', 'fields.pad.length' = '60'
);
CREATE TABLE sorted (id BIGINT, pad STRING) WITH ('connector' = 'filesystem', 'path' = '${out}/sorted', 'format' = 'csv');
INSERT INTO sorted SELECT id, pad FROM src ORDER BY id, pad;
";

/// Runs the spill script with `limit`; (committed lines, whether spill files appeared in
/// the spill directory while it ran, stderr).
fn sort_under(limit: &str) -> (Vec<String>, bool, String) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let spill = tmp.path().join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let s = write_script(
        tmp.path(),
        "job.sql",
        &render(
            SPILL_SQL,
            &[
                ("limit", limit),
                ("tmp", spill.to_str().unwrap()),
                ("out", out.to_str().unwrap()),
            ],
        ),
    );
    let mut child = spawn(&[s.to_str().unwrap(), "--mode", "batch"], &[]);
    let mut spilled = false;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        spilled |= walkdir(&spill).any(|p| p.is_file());
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let stderr = stderr_of(&mut child);
    assert!(status.success(), "{stderr}");
    (committed_lines(&out.join("sorted")), spilled, stderr)
}

fn walkdir(dir: &std::path::Path) -> impl Iterator<Item = std::path::PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    let mut files = Vec::new();
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.into_iter()
}

/// `taskmanager.memory.managed.size` bounds DataFusion's operators in batch mode: a sort of
/// ~70 MB of rows under a 64 MB budget spills to `io.tmp.dirs` and commits the same rows
/// as one with room to spare (which does not spill).
#[test]
fn batch_sort_larger_than_the_memory_budget_spills_and_gives_the_same_rows() {
    let (roomy, roomy_spilled, _) = sort_under("1 gb");
    let (tight, tight_spilled, _) = sort_under("64 mb");
    assert_eq!(roomy.len(), 1_000_000);
    assert!(!roomy_spilled, "a sort within its budget spilled");
    assert!(tight_spilled, "the sort over its budget did not spill");
    assert!(tight == roomy, "the spilled sort committed other rows");
}

/// An operator that cannot spill (a hash join's build side) and outgrows the budget fails
/// the query with an error naming the key to raise; nothing is committed.
#[test]
fn batch_join_over_the_memory_budget_fails_naming_the_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let s = write_script(
        tmp.path(),
        "job.sql",
        &render(
            "SET 'taskmanager.memory.managed.size' = '4 mb';
CREATE TABLE a (id BIGINT, pad STRING) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000000000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '300000',
  'fields.pad.length' = '60'
);
CREATE TABLE b (id BIGINT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000000000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '300000'
);
CREATE TABLE joined (id BIGINT, pad STRING) WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'csv');
INSERT INTO joined SELECT a.id, a.pad FROM a JOIN b ON a.id = b.id;
",
            &[("out", out.to_str().unwrap())],
        ),
    );
    let result = run(&[s.to_str().unwrap(), "--mode", "batch"]);
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(!result.status.success(), "the join fit in 4 MB: {err}");
    assert!(
        err.contains("'taskmanager.memory.managed.size' (4 MiB)") && !err.contains("panicked"),
        "{err}"
    );
    assert!(committed_lines(&out).is_empty());
}

/// EXPLAIN in batch mode shows what batch mode runs, DataFusion's physical plan; a join
/// of a table with an aggregate of it builds its hash table on the aggregate (estimated at
/// a tenth of its input, as Flink's planner does, when the number of groups is unknown).
#[test]
fn batch_explain_shows_the_physical_plan_and_joins_build_on_the_aggregate() {
    let query = "SELECT s.id FROM src s JOIN \
        (SELECT MAX(id) AS m FROM src GROUP BY id / 100) a ON s.id = a.m";
    let tmp = tempfile::tempdir().unwrap();
    let s = write_script(
        tmp.path(),
        "explain.sql",
        &format!("{}EXPLAIN {query};\n", sequence_src(10_000)),
    );
    let plan = run_ok(&[s.to_str().unwrap(), "--mode", "batch", "-p", "2"]);
    assert!(plan.contains("== Physical Plan =="), "{plan}");
    // The join's first child (DataFusion builds on it) is the aggregate's subtree.
    let lines: Vec<&str> = plan.lines().collect();
    let join = lines
        .iter()
        .position(|l| l.trim_start().starts_with("HashJoinExec"))
        .unwrap_or_else(|| panic!("no hash join in\n{plan}"));
    let depth = |l: &str| l.len() - l.trim_start().len();
    let child = depth(lines[join]) + 2;
    let build: Vec<&str> = lines[join + 1..]
        .iter()
        .skip(1)
        .take_while(|l| depth(l) > child)
        .copied()
        .collect();
    assert!(
        build.iter().any(|l| l.contains("AggregateExec")),
        "the join builds on the table, not the aggregate:\n{plan}"
    );
    let out = tmp.path().join("out");
    let s = write_script(
        tmp.path(),
        "job.sql",
        &format!(
            "{}CREATE TABLE out (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', \
             'format' = 'csv');\nINSERT INTO out {query};\n",
            sequence_src(10_000),
            out.display()
        ),
    );
    run_ok(&[s.to_str().unwrap(), "--mode", "batch", "-p", "2"]);
    let mut rows = committed_lines(&out);
    rows.sort_by_key(|r| r.parse::<i64>().unwrap());
    let expected: Vec<String> = (0..=100)
        .map(|g| (g * 100 + 99).min(10_000).to_string())
        .collect();
    assert_eq!(rows, expected);
}

/// A batch scan makes only what the query reads: a computed column the query does not
/// read is not computed (as Flink prunes it; here it would fail on every row), and the
/// datagen source leaves unread columns NULL instead of generating them.
#[test]
fn batch_scans_make_only_the_columns_the_query_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let s = write_script(
        tmp.path(),
        "job.sql",
        &format!(
            "CREATE TABLE src (id BIGINT, s STRING, bad AS CAST(s AS INT)) WITH (\
               'connector' = 'datagen', 'number-of-rows' = '100', 'fields.id.kind' = 'sequence', \
               'fields.id.start' = '1', 'fields.id.end' = '100');\n\
             CREATE TABLE out (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', \
               'format' = 'csv');\n\
             INSERT INTO out SELECT id FROM src WHERE id % 10 = 0;\n",
            out.display()
        ),
    );
    run_ok(&[s.to_str().unwrap(), "--mode", "batch", "-p", "2"]);
    let mut rows = committed_lines(&out);
    rows.sort_by_key(|r| r.parse::<i64>().unwrap());
    let expected: Vec<String> = (1..=10).map(|i| (i * 10).to_string()).collect();
    assert_eq!(rows, expected);
    // Reading the computed column does compute it (and fails naming it).
    let s = write_script(
        tmp.path(),
        "bad.sql",
        "CREATE TABLE src (id BIGINT, s STRING, bad AS CAST(s AS INT)) WITH (\
           'connector' = 'datagen', 'number-of-rows' = '100');\n\
         SELECT SUM(bad) FROM src;\n",
    );
    let failed = run(&[s.to_str().unwrap(), "--mode", "batch"]);
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success() && err.contains("bad"), "{err}");
}
