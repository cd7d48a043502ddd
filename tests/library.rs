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

/// A function the program registers is bound to Flink's `CREATE FUNCTION name AS
/// 'class'` by the class name's last segment (snake case), and `DROP FUNCTION` unbinds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_function_binds_a_registered_udf_by_class_name() {
    use weir::datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
    let mut engine = weir::Engine::default();
    engine.register_udf(create_udf(
        "times_ten",
        vec![DataType::Int64],
        DataType::Int64,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let a = args[0].clone().into_array(1)?;
            let out: Int64Array = a
                .as_primitive::<Int64Type>()
                .iter()
                .map(|v| v.map(|v| v * 10))
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out)))
        }),
    ));
    let run = async |engine: &mut weir::Engine, sql: &str| {
        for stmt in engine.parse(sql)? {
            engine.execute(&stmt).await?;
        }
        Ok::<_, weir::common::Error>(())
    };
    run(
        &mut engine,
        "CREATE TEMPORARY SYSTEM FUNCTION tenfold AS 'com.example.udf.TimesTen' LANGUAGE JAVA",
    )
    .await
    .unwrap();
    let rows = engine
        .query("SELECT tenfold(CAST(4 AS BIGINT)) AS t")
        .await
        .unwrap();
    assert_eq!(rows[0].column(0).as_primitive::<Int64Type>().value(0), 40);

    let again = run(
        &mut engine,
        "CREATE FUNCTION tenfold AS 'com.example.udf.TimesTen'",
    )
    .await;
    assert!(again.unwrap_err().to_string().contains("already exists"));
    run(
        &mut engine,
        "CREATE FUNCTION IF NOT EXISTS tenfold AS 'x.TimesTen'",
    )
    .await
    .unwrap();

    let unknown = run(&mut engine, "CREATE FUNCTION f AS 'com.example.Missing'").await;
    let message = unknown.unwrap_err().to_string();
    assert!(
        message.contains("'Missing'") && message.contains("times_ten"),
        "{message}"
    );

    run(&mut engine, "DROP TEMPORARY SYSTEM FUNCTION tenfold")
        .await
        .unwrap();
    assert!(engine.query("SELECT tenfold(1) AS t").await.is_err());
    // The program's own function stays.
    assert!(engine.query("SELECT times_ten(1) AS t").await.is_ok());
    assert!(run(&mut engine, "DROP FUNCTION tenfold").await.is_err());
    run(&mut engine, "DROP FUNCTION IF EXISTS tenfold")
        .await
        .unwrap();
}
