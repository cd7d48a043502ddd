//! The embedding library: Arrow data in, query results out, jobs under program control.

use arrow::array::{AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrow_batches_in_sql_results_out_and_a_job_handle() {
    let mut engine = weir::Engine::default();
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
    let batches: Vec<RecordBatch> = (0..10)
        .map(|i| {
            RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(Int64Array::from_iter_values(
                    i * 100..i * 100 + 100,
                ))],
            )
            .unwrap()
        })
        .collect();
    engine
        .register_batches("numbers", schema, batches)
        .await
        .unwrap();
    let rows = engine
        .query("SELECT SUM(v) AS s, COUNT(*) AS n FROM numbers WHERE v % 2 = 0")
        .await
        .unwrap();
    assert_eq!(
        rows[0].column(0).as_primitive::<Int64Type>().value(0),
        (0..1000).filter(|v| v % 2 == 0).sum::<i64>()
    );

    // The same table feeds a streaming job with exactly-once file output.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    engine.config_mut().set("parallelism.default", "2").unwrap();
    let job = engine
        .submit(&format!(
            "CREATE TABLE sink (v BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
             INSERT INTO sink SELECT v * 2 FROM numbers;",
            out.display()
        ))
        .await
        .unwrap()
        .unwrap();
    let outcome = job.wait().await.unwrap();
    assert!(
        outcome.checkpoints_completed >= 1,
        "the final checkpoint commits the output"
    );
    let values = crate::common::committed_numbers(&out);
    assert_eq!(values, (0..1000).map(|v| v * 2).collect::<Vec<_>>());
}
