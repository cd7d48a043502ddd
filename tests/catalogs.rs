//! Catalogs and databases as in Flink: `CREATE/DROP CATALOG`, `CREATE/DROP DATABASE`,
//! `USE`, three-part names, the `SHOW` statements and `ALTER TABLE/VIEW`; and the
//! persistent `weir` catalog, whose definitions outlive the process that made them.

use crate::common::{committed_lines, run, run_ok, spawn, write_script};
use std::path::Path;

/// `(a, b)` rows 1..=n as csv lines.
fn write_numbers(path: &Path, n: i64) {
    let text: String = (1..=n).map(|i| format!("{i},{}\n", i * 10)).collect();
    std::fs::write(path, text).unwrap();
}

fn table_rows(stdout: &str) -> Vec<String> {
    // print_table's rows: `| cell | … |` lines without the header's dashes.
    stdout
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect()
}

#[test]
fn databases_use_and_three_part_names_in_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("in.csv");
    write_numbers(&data, 6);
    let out = tmp.path().join("out");
    let script = format!(
        "SHOW CURRENT CATALOG;\n\
         SHOW CURRENT DATABASE;\n\
         CREATE CATALOG other WITH ('type' = 'generic_in_memory', 'default-database' = 'main');\n\
         CREATE DATABASE other.sales COMMENT 'orders and such';\n\
         CREATE TABLE other.sales.orders (a BIGINT, b BIGINT) WITH ('connector' = 'filesystem', \
           'path' = '{data}', 'format' = 'csv');\n\
         USE other.sales;\n\
         CREATE VIEW big AS SELECT a, b FROM orders WHERE a > 3;\n\
         USE CATALOG default_catalog;\n\
         CREATE TABLE orders (x INT) WITH ('connector' = 'datagen', 'number-of-rows' = '1');\n\
         CREATE TABLE sink (a BIGINT, b BIGINT) WITH ('connector' = 'filesystem', 'path' = '{out}', \
           'format' = 'csv');\n\
         SHOW CATALOGS;\n\
         SHOW DATABASES FROM other;\n\
         SHOW TABLES FROM other.sales;\n\
         SHOW TABLES LIKE 'ord%';\n\
         SHOW COLUMNS FROM other.sales.big LIKE 'b';\n\
         INSERT INTO sink SELECT v.a, v.b FROM other.sales.big AS v JOIN other.sales.orders o ON v.a = o.a;\n",
        data = data.display(),
        out = out.display()
    );
    let s = write_script(tmp.path(), "catalogs.sql", &script);
    let stdout = run_ok(&[s.to_str().unwrap(), "-p", "2"]);
    let rows = table_rows(&stdout);
    let expected_rows = [
        "current catalog name",
        "default_catalog",
        "current database name",
        "default_database",
        "catalog name",
        "default_catalog",
        "other",
        "database name",
        "main",
        "sales",
        "table name",
        "big",
        "orders",
        "table name",
        "orders",
        "name,type,null,watermark",
        "b,BIGINT,TRUE,",
    ];
    assert_eq!(rows, expected_rows, "stdout:\n{stdout}");
    assert_eq!(
        committed_lines(&out),
        ["4,40", "5,50", "6,60"],
        "the view in other.sales reads other.sales.orders, not default_catalog's orders"
    );
}

#[test]
fn catalog_statements_fail_with_what_is_wrong() {
    let fails = |sql: &str, needle: &str| {
        let tmp = tempfile::tempdir().unwrap();
        let s = write_script(tmp.path(), "bad.sql", sql);
        let out = run(&[s.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success(), "expected failure for {sql}");
        assert!(err.contains(needle), "'{needle}' not in:\n{err}");
        assert!(!err.contains("panicked"), "{err}");
    };
    fails(
        "USE CATALOG nope;",
        "catalog 'nope' does not exist (catalogs: default_catalog)",
    );
    fails(
        "CREATE CATALOG h WITH ('type' = 'hive');",
        "catalog type 'hive' is not supported by Weir",
    );
    fails(
        "CREATE CATALOG w WITH ('type' = 'weir');",
        "a 'weir' catalog needs a 'path'",
    );
    fails("SELECT 1;\nSELECT * FROM nodb.t;", "line 2");
    fails(
        "CREATE DATABASE d;\nCREATE TABLE d.t (a INT) WITH ('connector' = 'datagen');\nDROP DATABASE d;",
        "database 'd' in catalog 'default_catalog' is not empty",
    );
    fails(
        "DROP DATABASE default_database;",
        "it is the current database",
    );
    fails(
        "CREATE TABLE t (a INT) WITH ('connector' = 'datagen');\nALTER TABLE t RENAME TO other_db.u;",
        "renamed within its database",
    );
    fails(
        "CREATE TABLE t (a INT) WITH ('connector' = 'datagen');\nALTER TABLE t ADD a BIGINT;",
        "already has a column 'a'",
    );
    fails(
        "CREATE TABLE t (a INT) WITH ('connector' = 'datagen');\nALTER TABLE t SET ('fields.a.kind' = 'nonsense');",
        "nonsense",
    );
    fails(
        "CREATE TABLE t (a INT) WITH ('connector' = 'datagen');\nALTER TABLE t DROP a;",
        "ALTER TABLE … DROP is not supported yet",
    );
}

/// What one process defines in a `weir` catalog, the next process sees: databases,
/// tables (option values unmasked in the files, masked when shown), views over them,
/// `ALTER TABLE` (options, columns, rename) and drops; temporary objects stay behind.
#[test]
fn persistent_catalog_outlives_the_process() {
    let tmp = tempfile::tempdir().unwrap();
    let catalog = tmp.path().join("catalog");
    let first = tmp.path().join("first.csv");
    let second = tmp.path().join("second.csv");
    write_numbers(&first, 5);
    std::fs::write(&second, "100,1\n200,2\n").unwrap();
    let create = format!(
        "CREATE CATALOG lake WITH ('type' = 'weir', 'path' = '{}');\n",
        catalog.display()
    );
    let run_script = |name: &str, body: &str| {
        let s = write_script(tmp.path(), name, &format!("{create}{body}"));
        run_ok(&[s.to_str().unwrap(), "-p", "2"])
    };
    run_script(
        "define.sql",
        &format!(
            "CREATE DATABASE lake.sales;\n\
             CREATE TABLE lake.sales.orders (a BIGINT, b BIGINT) WITH ('connector' = 'filesystem', \
               'path' = '{}', 'format' = 'csv', 's3.secret-key' = 'hunter2');\n\
             USE lake.sales;\n\
             CREATE VIEW small AS SELECT a, b FROM orders WHERE a < 3;\n\
             CREATE TEMPORARY TABLE scratch (a INT) WITH ('connector' = 'datagen');\n\
             CREATE TEMPORARY VIEW scratch_view AS SELECT 1 AS one;\n",
            first.display()
        ),
    );
    let out1 = tmp.path().join("out1");
    let stdout = run_script(
        "read.sql",
        &format!(
            "SHOW DATABASES FROM lake;\n\
             SHOW TABLES FROM lake.sales;\n\
             SHOW CREATE TABLE lake.sales.orders;\n\
             CREATE TABLE sink (a BIGINT, b BIGINT) WITH ('connector' = 'filesystem', \
               'path' = '{}', 'format' = 'csv');\n\
             INSERT INTO sink SELECT * FROM lake.sales.small;\n",
            out1.display()
        ),
    );
    let rows = table_rows(&stdout);
    assert_eq!(
        rows[..6],
        [
            "database name",
            "default_database",
            "sales",
            "table name",
            "orders",
            "small"
        ],
        "{stdout}"
    );
    assert!(
        stdout.contains("CREATE TABLE `lake`.`sales`.`orders`")
            && stdout.contains("'s3.secret-key' = '******'")
            && !stdout.contains("hunter2"),
        "SHOW CREATE TABLE names the path and masks secrets:\n{stdout}"
    );
    assert_eq!(committed_lines(&out1), ["1,10", "2,20"]);
    let stored = std::fs::read_to_string(catalog.join("sales/objects/orders.json")).unwrap();
    assert!(
        stored.contains("hunter2"),
        "the catalog keeps the real value: {stored}"
    );

    // Altered: another file, a computed column, a new name; the view follows the table
    // (it reads it by name).
    run_script(
        "alter.sql",
        &format!(
            "ALTER TABLE lake.sales.orders SET ('path' = '{}');\n\
             ALTER TABLE lake.sales.orders ADD c AS a + b AFTER a;\n\
             ALTER VIEW lake.sales.small AS SELECT a, c FROM lake.sales.orders WHERE a < 150;\n\
             ALTER VIEW lake.sales.small RENAME TO smaller;\n",
            second.display()
        ),
    );
    let out2 = tmp.path().join("out2");
    let stdout = run_script(
        "read_again.sql",
        &format!(
            "DESCRIBE lake.sales.orders;\n\
             SHOW VIEWS FROM lake.sales;\n\
             CREATE TABLE sink (a BIGINT, c BIGINT) WITH ('connector' = 'filesystem', \
               'path' = '{}', 'format' = 'csv');\n\
             INSERT INTO sink SELECT * FROM lake.sales.smaller;\n\
             DROP VIEW lake.sales.smaller;\n\
             ALTER TABLE lake.sales.orders RENAME TO orders_v2;\n",
            out2.display()
        ),
    );
    assert_eq!(
        table_rows(&stdout),
        [
            "name,type,null,watermark",
            "a,BIGINT,TRUE,",
            "c,BIGINT,TRUE,",
            "b,BIGINT,TRUE,",
            "view name",
            "smaller",
        ],
        "{stdout}"
    );
    assert_eq!(committed_lines(&out2), ["100,101"]);
    let stdout = run_script(
        "list.sql",
        "SHOW TABLES FROM lake.sales;\nDROP DATABASE lake.sales CASCADE;\nSHOW DATABASES FROM lake;\n",
    );
    assert_eq!(
        table_rows(&stdout),
        [
            "table name",
            "orders_v2",
            "database name",
            "default_database"
        ]
    );
    let stdout = run_script("empty.sql", "SHOW DATABASES FROM lake;\n");
    assert_eq!(table_rows(&stdout), ["database name", "default_database"]);
}

/// Two processes define tables in one `weir` catalog at the same time: every definition
/// lands whole, and of the two that create the same name, exactly one succeeds.
#[test]
fn concurrent_sessions_do_not_corrupt_a_persistent_catalog() {
    let tmp = tempfile::tempdir().unwrap();
    let catalog = tmp.path().join("catalog");
    let create = format!(
        "CREATE CATALOG lake WITH ('type' = 'weir', 'path' = '{}');\nUSE CATALOG lake;\n",
        catalog.display()
    );
    // The catalog exists before the race (its default database's marker).
    let s = write_script(tmp.path(), "init.sql", &create);
    run_ok(&[s.to_str().unwrap()]);
    let script = |prefix: &str| {
        let mut text = create.clone();
        for i in 0..40 {
            text.push_str(&format!(
                "CREATE TABLE {prefix}_{i} (id BIGINT, note STRING, \
                 ts AS TO_TIMESTAMP_LTZ(id, 3), WATERMARK FOR ts AS ts) \
                 WITH ('connector' = 'datagen', 'number-of-rows' = '{i}');\n"
            ));
        }
        text.push_str(
            "CREATE TABLE clash (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '1');\n",
        );
        write_script(tmp.path(), &format!("{prefix}.sql"), &text)
    };
    let (a, b) = (script("a"), script("b"));
    let children = [
        spawn(&[a.to_str().unwrap()], &[]),
        spawn(&[b.to_str().unwrap()], &[]),
    ];
    let outputs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let failed: Vec<String> = outputs
        .iter()
        .filter(|o| !o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stderr).to_string())
        .collect();
    assert_eq!(failed.len(), 1, "exactly one 'clash' fails: {failed:?}");
    // The loser learns it either from the catalog it reads (the winner finished first) or
    // from the conditional write (both checked at once); both name the table.
    assert!(failed[0].contains("clash' already exists"), "{}", failed[0]);
    let s = write_script(
        tmp.path(),
        "check.sql",
        &format!("{create}SHOW TABLES;\nSHOW CREATE TABLE a_39;\nSHOW CREATE TABLE b_0;\n"),
    );
    let stdout = run_ok(&[s.to_str().unwrap()]);
    let tables = table_rows(&stdout);
    assert_eq!(tables.len(), 1 + 81, "{stdout}");
    assert!(stdout.contains("'number-of-rows' = '39'") && stdout.contains("WATERMARK FOR `ts`"));
}
