//! Weir embedded in a Rust program: Arrow batches in, a bounded query, and a streaming
//! job with exactly-once Parquet output that is checkpointed and stopped with a savepoint.
//!
//! `cargo run -p weir --example embedded`

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use std::sync::Arc;

#[tokio::main]
async fn main() -> weir::Result<()> {
    let dir = std::env::temp_dir().join(format!("weir-embedded-{}", std::process::id()));
    let mut engine = weir::Engine::default();

    // 1. Arrow data as a table, queried with DataFusion.
    let schema = Arc::new(Schema::new(vec![
        Field::new("city", DataType::Utf8, false),
        Field::new("visits", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(vec!["Lyon", "Oslo", "Lyon", "Kyoto"])),
            Arc::new(Int64Array::from(vec![3, 5, 4, 1])),
        ],
    )?;
    engine
        .register_batches("visits", schema, vec![batch])
        .await?;
    let rows = engine
        .query("SELECT city, SUM(visits) AS total FROM visits GROUP BY city ORDER BY city")
        .await?;
    println!("{}", arrow::util::pretty::pretty_format_batches(&rows)?);

    // 2. An unbounded streaming job with exactly-once Parquet output.
    engine
        .config_mut()
        .set("execution.checkpointing.interval", "200 ms")?;
    engine.config_mut().set(
        "execution.checkpointing.dir",
        &dir.join("chk").to_string_lossy(),
    )?;
    let job = engine
        .submit(&format!(
            "CREATE TABLE ticks (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '1000');
             CREATE TABLE out_ticks (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'parquet');
             INSERT INTO out_ticks SELECT id FROM ticks WHERE id % 2 = 0;",
            dir.join("out").display()
        ))
        .await?
        .expect("the script has an INSERT");
    let checkpoint = job.checkpoint().await?;
    println!(
        "checkpoint {checkpoint} completed; rows in so far: {}",
        job.metrics.rows_in()
    );
    let savepoint = job
        .stop_with_savepoint(true, &dir.join("savepoints").to_string_lossy())
        .await?;
    job.wait().await?;
    println!("stopped with savepoint {savepoint}");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
