-- modes: batch streaming
-- description: a TUMBLE aggregate that keeps window_time as its rowtime, then a second, coarser TUMBLE over it (Flink's documented cascading pattern). Query 3: the second TUMBLE over a view that still has window_start/window_end columns is refused (ambiguous column).
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

CREATE VIEW per_customer AS
SELECT window_start AS w5_start, window_end AS w5_end, window_time AS rowtime, customer, SUM(amount) AS total, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '5' MINUTES))
GROUP BY window_start, window_end, window_time, customer;

-- The same first level, keeping the names window_start and window_end.
CREATE VIEW per_customer_same_names AS
SELECT window_start, window_end, window_time AS rowtime, customer, SUM(amount) AS total
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '5' MINUTES))
GROUP BY window_start, window_end, window_time, customer;

SELECT w5_start, w5_end, rowtime, customer, total, n FROM per_customer;

SELECT window_start, window_end, SUM(total) AS total, SUM(n) AS n, COUNT(*) AS customers
FROM TABLE(TUMBLE(TABLE per_customer, DESCRIPTOR(rowtime), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end;

SELECT window_start, window_end, SUM(total) AS total
FROM TABLE(TUMBLE(TABLE per_customer_same_names, DESCRIPTOR(rowtime), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end;
