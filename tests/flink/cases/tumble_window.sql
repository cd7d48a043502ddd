-- modes: batch streaming
-- description: TUMBLE window TVF aggregates on a rowtime with a 1 s bounded-out-of-orderness watermark (streaming: append); the legacy GROUP BY TUMBLE form.
CREATE TABLE orders (
  order_id INT,
  customer STRING,
  product STRING,
  amount DECIMAL(10, 2),
  qty INT,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/orders.csv',
  'format' = 'csv'
);

SELECT window_start, window_end, COUNT(*) AS n, SUM(amount) AS total, MAX(qty) AS max_qty
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '5' MINUTES))
GROUP BY window_start, window_end;

SELECT window_start, window_end, customer, COUNT(*) AS n, SUM(qty) AS qty
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end, customer;

SELECT
  TUMBLE_START(ts, INTERVAL '5' MINUTE) AS ws,
  TUMBLE_END(ts, INTERVAL '5' MINUTE) AS we,
  COUNT(*) AS n
FROM orders
GROUP BY TUMBLE(ts, INTERVAL '5' MINUTE);
