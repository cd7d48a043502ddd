//! The filesystem source reads Parquet, CSV and JSON files; the quickstart runs.

use crate::common::*;
use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use std::sync::Arc;

#[test]
fn reads_parquet_csv_and_json_files() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir_all(input.join("sub")).unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from((1..=1000).collect::<Vec<i64>>())),
            Arc::new(StringArray::from(
                (1..=1000).map(|i| format!("n{i}")).collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap();
    let file = std::fs::File::create(input.join("part.parquet")).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, schema.clone(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let file = std::fs::File::create(input.join("sub/more.parquet")).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, schema.clone(), None).unwrap();
    w.write(&batch.slice(0, 10)).unwrap();
    w.close().unwrap();
    // A hidden file is not input.
    std::fs::write(input.join(".hidden.parquet"), "garbage").unwrap();

    let csv = tmp.path().join("c");
    std::fs::create_dir(&csv).unwrap();
    std::fs::write(csv.join("x.csv"), "id,name\n2001,x\n2002,y\n").unwrap();

    let out = tmp.path().join("out");
    let sql = format!(
        "CREATE TABLE p (id BIGINT, name STRING) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'parquet');\n\
         CREATE TABLE c (id BIGINT, name STRING) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv', 'csv.ignore-first-line' = 'true');\n\
         CREATE TABLE d (id BIGINT, name STRING) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');\n\
         INSERT INTO d SELECT id, name FROM p WHERE id % 10 = 0 UNION ALL SELECT id, name FROM c;",
        input.display(),
        csv.display(),
        out.display()
    );
    let s = write_script(tmp.path(), "job.sql", &sql);
    run_ok(&[s.to_str().unwrap(), "-p", "2"]);
    let mut expected: Vec<String> = (1..=100)
        .chain([1]) // row 10 again, from sub/more.parquet
        .map(|i| format!("{{\"id\":{},\"name\":\"n{}\"}}", i * 10, i * 10))
        .chain([
            "{\"id\":2001,\"name\":\"x\"}".to_string(),
            "{\"id\":2002,\"name\":\"y\"}".to_string(),
        ])
        .collect();
    expected.sort();
    assert_eq!(committed_lines(&out), expected);
}

#[test]
fn quickstart_commits_parquet_files() {
    let tmp = tempfile::tempdir().unwrap();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql-examples/quickstart.sql");
    let out = weir()
        .current_dir(tmp.path())
        .args(["run", "--quiet", script.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = tmp.path().join("weir-output/big_orders");
    let mut rows = 0;
    let mut ids = std::collections::HashSet::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        assert!(!name.starts_with('.'), "uncommitted part left: {name}");
        let file = std::fs::File::open(e.path()).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        for b in reader {
            let b = b.unwrap();
            let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            for v in col.iter().flatten() {
                assert!(ids.insert(v), "order {v} written twice");
            }
            rows += b.num_rows();
        }
    }
    assert!(rows > 100_000, "only {rows} rows committed");
}

#[test]
fn a_second_job_never_overwrites_committed_output() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let sql = format!(
        "CREATE TABLE s (id BIGINT) WITH ('connector' = 'datagen', 'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '100');\n\
         CREATE TABLE d (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
         INSERT INTO d SELECT id FROM s;",
        out.display()
    );
    let s = write_script(tmp.path(), "job.sql", &sql);
    run_ok(&[s.to_str().unwrap(), "-p", "2"]);
    let first = committed_lines(&out);
    run_ok(&[s.to_str().unwrap(), "-p", "2"]);
    let both = committed_lines(&out);
    assert_eq!(first.iter().filter(|l| *l != "id").count(), 100);
    assert_eq!(
        both.iter().filter(|l| *l != "id").count(),
        200,
        "the second run replaced files of the first"
    );
}

/// Writes `part-<i>.csv` with ids `i*100 .. i*100+99` atomically (hidden name, then rename),
/// as a producer feeding a monitored folder must.
fn drop_file(dir: &std::path::Path, i: u64) {
    let ids: String = (i * 100..i * 100 + 100)
        .map(|id| format!("{id}\n"))
        .collect();
    let hidden = dir.join(format!(".part-{i}.csv"));
    std::fs::write(&hidden, ids).unwrap();
    std::fs::rename(&hidden, dir.join(format!("part-{i:03}.csv"))).unwrap();
}

pub(crate) fn wait_for(
    what: &str,
    child: &mut std::process::Child,
    mut done: impl FnMut() -> bool,
) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "timed out waiting for {what}"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the unbounded job ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// With `source.monitor-interval` the filesystem source is unbounded: files dropped into
/// the folder while the job runs are read, each exactly once, across SIGKILLs and
/// restores at other parallelisms (the source's state is the set of files it finished).
#[test]
fn monitored_folder_reads_new_files_exactly_once_across_kills() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir(&input).unwrap();
    let (out, chk) = (tmp.path().join("out"), tmp.path().join("chk"));
    let script = write_script(
        tmp.path(),
        "monitor.sql",
        &render(
            "
CREATE TABLE events (id BIGINT) WITH (
  'connector' = 'filesystem', 'path' = '${in}', 'format' = 'csv',
  'source.monitor-interval' = '30 ms'
);
CREATE TABLE copy (id BIGINT, twice BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');
INSERT INTO copy SELECT id, id * 2 FROM events;
",
            &[
                ("in", input.to_str().unwrap()),
                ("out", out.to_str().unwrap()),
            ],
        ),
    );
    // Each run restores the latest checkpoint, at parallelism `p`.
    let start = |p: &str| {
        spawn(
            &[
                script.to_str().unwrap(),
                "-p",
                p,
                "--checkpoint-dir",
                chk.to_str().unwrap(),
                "--checkpoint-interval",
                "60 ms",
                "--restore",
                "latest",
            ],
            &[],
        )
    };
    let mut rng = Lcg(7);
    let mut files = 0;
    for p in ["2", "3", "1", "2", "3"] {
        let mut child = start(p);
        for _ in 0..6 {
            drop_file(&input, files);
            files += 1;
            std::thread::sleep(std::time::Duration::from_millis(20 + rng.next(60)));
        }
        std::thread::sleep(std::time::Duration::from_millis(rng.next(300)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }
    // A last run takes in whatever is left; it never ends by itself.
    let mut child = start("2");
    let rows = (files * 100) as usize;
    wait_for("every row to be committed", &mut child, || {
        committed_lines(&out).len() >= rows
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    let mut expected: Vec<String> = (0..files * 100)
        .map(|id| format!("{{\"id\":{id},\"twice\":{}}}", id * 2))
        .collect();
    expected.sort();
    crate::crash::assert_same_rows(committed_lines(&out), &expected, "monitored folder");
}

/// An idle source does not hold back event time (`table.exec.source.idle-timeout`): a
/// window over a monitored folder UNION ALL an always-empty one fires while the job runs,
/// and so does a window whose files all belong to one of two source subtasks.
#[test]
fn idle_sources_let_windows_fire() {
    let tmp = tempfile::tempdir().unwrap();
    let (input, quiet) = (tmp.path().join("in"), tmp.path().join("quiet"));
    std::fs::create_dir(&input).unwrap();
    std::fs::create_dir(&quiet).unwrap();
    let out = tmp.path().join("out");
    let script = write_script(
        tmp.path(),
        "idle.sql",
        &render(
            "
SET 'table.exec.source.idle-timeout' = '100 ms';
CREATE TABLE events (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3), WATERMARK FOR ts AS ts) WITH (
  'connector' = 'filesystem', 'path' = '${in}', 'format' = 'csv',
  'source.monitor-interval' = '20 ms'
);
CREATE TABLE silent (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3), WATERMARK FOR ts AS ts) WITH (
  'connector' = 'filesystem', 'path' = '${quiet}', 'format' = 'csv',
  'source.monitor-interval' = '20 ms'
);
CREATE TABLE per_second (window_start TIMESTAMP(3), n BIGINT, lo BIGINT, hi BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');
INSERT INTO per_second
SELECT window_start, COUNT(*), MIN(id), MAX(id)
FROM TABLE(TUMBLE(TABLE (SELECT * FROM events UNION ALL SELECT * FROM silent),
                  DESCRIPTOR(ts), INTERVAL '1' SECOND))
GROUP BY window_start, window_end;
",
            &[
                ("in", input.to_str().unwrap()),
                ("quiet", quiet.to_str().unwrap()),
                ("out", out.to_str().unwrap()),
            ],
        ),
    );
    let mut child = spawn(
        &[
            script.to_str().unwrap(),
            "-p",
            "2",
            "--checkpoint-interval",
            "50 ms",
        ],
        &[],
    );
    // One file per second of event time, each read before the next is dropped: the
    // window of second i can fire once second i + 1 arrives.
    for i in 0..6 {
        drop_file(&input, i);
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    wait_for("five windows", &mut child, || {
        committed_lines(&out).len() >= 5
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    let expected: Vec<String> = (0..5)
        .map(|i| {
            format!(
                "{{\"window_start\":\"1970-01-01 00:00:0{i}\",\"n\":100,\"lo\":{},\"hi\":{}}}",
                i * 100,
                i * 100 + 99
            )
        })
        .collect();
    assert_eq!(committed_lines(&out), expected);
}

/// Two INSERTs reading one table read it once (`table.optimizer.reuse-source-enabled`,
/// on by default): one source vertex feeds both, and the two outputs split its rows.
#[test]
fn statements_reading_one_table_share_its_source() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir(&input).unwrap();
    let rows: String = (1..=1000).map(|i| format!("{i}\n")).collect();
    std::fs::write(input.join("a.csv"), rows).unwrap();
    let (low, high) = (tmp.path().join("low"), tmp.path().join("high"));
    let script = |reuse: &str, explain: &str| {
        let sql = format!(
            "SET 'table.optimizer.reuse-source-enabled' = '{reuse}';\n\
             CREATE TABLE t (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
             CREATE TABLE low (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
             CREATE TABLE high (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
             {explain} STATEMENT SET BEGIN\n\
             INSERT INTO low SELECT id FROM t WHERE id <= 300;\n\
             INSERT INTO high SELECT id FROM t WHERE id > 300;\n\
             END;",
            input.display(),
            low.display(),
            high.display()
        );
        write_script(tmp.path(), "job.sql", &sql)
    };
    let sources = |reuse: &str| {
        let plan = run_ok(&[script(reuse, "EXPLAIN").to_str().unwrap(), "-p", "2"]);
        plan.matches("Source: filesystem").count()
    };
    assert_eq!(sources("true"), 1);
    assert_eq!(sources("false"), 2);
    run_ok(&[script("true", "EXECUTE").to_str().unwrap(), "-p", "2"]);
    assert_eq!(committed_numbers(&low), (1..=300).collect::<Vec<_>>());
    assert_eq!(committed_numbers(&high), (301..=1000).collect::<Vec<_>>());
}

/// `CREATE TABLE … LIKE`: a sink declared like its source with another path and format,
/// and a source with an extra column and an overwritten option; DESCRIBE shows the merge.
#[test]
fn tables_declared_like_another_take_its_columns_and_options() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let sql = format!(
        "CREATE TABLE src (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 1000, 3), \
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) \
         WITH ('connector' = 'datagen', 'number-of-rows' = '100', 'fields.id.kind' = 'sequence', \
               'fields.id.start' = '1', 'fields.id.end' = '100');\n\
         CREATE TABLE fewer (tag STRING) WITH ('number-of-rows' = '5', 'fields.id.end' = '5') LIKE src;\n\
         DESCRIBE fewer;\n\
         SHOW CREATE TABLE fewer;\n\
         CREATE TABLE dst WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv') \
           LIKE src (EXCLUDING OPTIONS, EXCLUDING GENERATED, EXCLUDING WATERMARKS);\n\
         INSERT INTO dst SELECT id FROM fewer WHERE tag IS NOT NULL;",
        out.display()
    );
    let s = write_script(tmp.path(), "job.sql", &sql);
    let described = run_ok(&[s.to_str().unwrap(), "-p", "1"]);
    for cell in ["| id ", "| ts ", "ts - INTERVAL '1' SECOND", "| tag "] {
        assert!(described.contains(cell), "{described}");
    }
    // SHOW CREATE TABLE prints the merged definition.
    for part in [
        "CREATE TABLE `default_catalog`.`default_database`.`fewer` (",
        "`tag` STRING",
        "WATERMARK FOR `ts` AS ts - INTERVAL '1' SECOND",
        "'connector' = 'datagen'",
        "'number-of-rows' = '5'",
    ] {
        assert!(described.contains(part), "{described}");
    }
    let mut rows = committed_lines(&out);
    rows.retain(|l| l != "id");
    assert_eq!(rows, ["1", "2", "3", "4", "5"]);
}

/// `CURRENT_WATERMARK` as Flink documents it, to drop late rows: a second file arriving
/// after the first one's rows moved the watermark loses its rows older than the watermark
/// and keeps the newer ones.
#[test]
fn current_watermark_filters_late_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir(&input).unwrap();
    let out = tmp.path().join("out");
    let script = write_script(
        tmp.path(),
        "late.sql",
        &render(
            "
CREATE TABLE events (id INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
WITH ('connector' = 'filesystem', 'path' = '${in}', 'format' = 'csv',
      'source.monitor-interval' = '30 ms');
CREATE TABLE on_time (id INT, wm TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'csv');
INSERT INTO on_time SELECT id, CURRENT_WATERMARK(ts) FROM events
WHERE CURRENT_WATERMARK(ts) IS NULL OR ts > CURRENT_WATERMARK(ts);
",
            &[
                ("in", input.to_str().unwrap()),
                ("out", out.to_str().unwrap()),
            ],
        ),
    );
    let mut child = spawn(
        &[
            script.to_str().unwrap(),
            "-p",
            "1",
            "--checkpoint-interval",
            "50 ms",
        ],
        &[],
    );
    let drop = |name: &str, rows: &str| {
        let tmp_file = input.join(format!(".{name}"));
        std::fs::write(&tmp_file, rows).unwrap();
        std::fs::rename(&tmp_file, input.join(name)).unwrap();
    };
    drop(
        "1.csv",
        "1,2024-01-01 10:00:00\n2,2024-01-01 10:00:05\n3,2024-01-01 10:00:10\n",
    );
    wait_for("the first file's rows", &mut child, || {
        committed_lines(&out).len() == 3
    });
    // The watermark is now 10:00:08: rows 4 and 6 are late, 5 and 7 are not.
    drop(
        "2.csv",
        "4,2024-01-01 10:00:07\n5,2024-01-01 10:00:09\n6,2024-01-01 10:00:01\n7,2024-01-01 10:00:30\n",
    );
    wait_for("the second file's on-time rows", &mut child, || {
        committed_lines(&out).len() >= 5
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        committed_lines(&out),
        [
            "1,",
            "2,",
            "3,",
            "5,\"2024-01-01 10:00:08\"",
            "7,\"2024-01-01 10:00:08\"",
        ]
    );
}
