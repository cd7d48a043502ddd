-- modes: batch streaming
-- batch: as streaming
-- description: session windows (legacy GROUP BY SESSION with SESSION_START/SESSION_END, and the SESSION window TVF with PARTITION BY): sessions per customer and over all rows, gaps that merge and split them, rows exactly one gap apart (alice at 10:05 and 10:10 with a 5-minute gap), an out-of-order row within the watermark; batch mode merges the same sessions.
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

SELECT customer, SESSION_START(ts, INTERVAL '1' MINUTE) AS s, SESSION_END(ts, INTERVAL '1' MINUTE) AS e,
       COUNT(*) AS n, SUM(amount) AS total
FROM orders
GROUP BY customer, SESSION(ts, INTERVAL '1' MINUTE);

SELECT customer, SESSION_START(ts, INTERVAL '5' MINUTE) AS s, SESSION_END(ts, INTERVAL '5' MINUTE) AS e,
       COUNT(*) AS n, MIN(product) AS first_product
FROM orders
GROUP BY customer, SESSION(ts, INTERVAL '5' MINUTE);

SELECT SESSION_START(ts, INTERVAL '2' MINUTE) AS s, SESSION_END(ts, INTERVAL '2' MINUTE) AS e,
       COUNT(*) AS n, MAX(qty) AS max_qty
FROM orders
GROUP BY SESSION(ts, INTERVAL '2' MINUTE);

SELECT window_start, window_end, customer, COUNT(*) AS n, SUM(qty) AS qty
FROM TABLE(SESSION(TABLE orders PARTITION BY customer, DESCRIPTOR(ts), INTERVAL '90' SECOND))
GROUP BY window_start, window_end, customer;
