-- Quickstart: generated orders, filtered and enriched, written exactly once as Parquet.
--   weir run sql-examples/quickstart.sql
-- Output: weir-output/big_orders/part-*.parquet (only committed files are visible).

SET 'execution.checkpointing.interval' = '2 s';
SET 'execution.checkpointing.dir' = 'weir-output/checkpoints';

CREATE TABLE orders (
  order_id    BIGINT,
  customer_id INT,
  amount      DECIMAL(6, 2),
  currency    STRING,
  order_time  TIMESTAMP(3),
  WATERMARK FOR order_time AS order_time - INTERVAL '5' SECOND
) WITH (
  'connector' = 'datagen',
  'rows-per-second' = '500000',
  'fields.order_id.kind' = 'sequence',
  'fields.order_id.start' = '1',
  'fields.order_id.end' = '2000000',
  'fields.customer_id.min' = '1',
  'fields.customer_id.max' = '5000',
  'fields.currency.length' = '3'
);

CREATE TABLE big_orders (
  order_id        BIGINT,
  customer_id     INT,
  amount          DECIMAL(6, 2),
  amount_with_tax DECIMAL(10, 2),
  currency        STRING,
  order_time      TIMESTAMP(3)
) WITH (
  'connector' = 'filesystem',
  'path' = 'weir-output/big_orders',
  'format' = 'parquet'
);

INSERT INTO big_orders
SELECT order_id, customer_id, amount, amount * 1.2, UPPER(currency), order_time
FROM orders
WHERE amount > 5000 AND customer_id % 7 <> 0;
