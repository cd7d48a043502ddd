-- Weir's canonical job: orders from Kafka, counted and summed per ten seconds of event
-- time, written exactly once as Parquet on S3 (checkpoints there too).
--   AWS_ENDPOINT=… AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=… AWS_REGION=… \
--     weir run sql-examples/kafka_orders_to_s3.sql
-- Needs a Kafka broker on localhost:9092 with a topic 'orders' holding JSON values such as
--   {"id": 1, "amount": 42, "ts": "2026-01-01 00:00:00.050"}
-- and a bucket 'weir-demo'. A crash loses nothing and writes nothing twice: restart with
-- `--restore latest`. tests/pipeline.rs runs this job under SIGKILL.

SET 'execution.checkpointing.interval' = '10 s';
SET 'execution.checkpointing.dir' = 's3://weir-demo/checkpoints';

CREATE TABLE orders (
  id     BIGINT,
  amount INT,
  ts     TIMESTAMP(3),
  -- Watermarks are kept per partition: a partition read ahead makes no other's rows late.
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'kafka',
  'topic' = 'orders',
  'properties.bootstrap.servers' = 'localhost:9092',
  'properties.group.id' = 'weir-orders',
  'scan.startup.mode' = 'earliest-offset',
  'format' = 'json'
);

CREATE TABLE totals (
  window_start TIMESTAMP(3),
  orders       BIGINT,
  amount       BIGINT
) WITH (
  'connector' = 'filesystem',
  'path' = 's3://weir-demo/totals',
  'format' = 'parquet'
);

INSERT INTO totals
SELECT window_start, COUNT(*), SUM(amount)
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY window_start, window_end;
