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
         CREATE TABLE c (id BIGINT, name STRING) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
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
