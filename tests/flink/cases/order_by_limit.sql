-- modes: batch streaming
-- description: ORDER BY in streaming mode as Flink runs it: on a time attribute first (rowtime: a temporal sort, append-only, with a LIMIT; PROCTIME(): arrival order), otherwise ORDER BY … LIMIT n [OFFSET m] as an updating Top-N over the whole input (over an append-only table and over an updating aggregate).
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

SELECT order_id, customer, amount FROM orders ORDER BY amount DESC, order_id LIMIT 3;

SELECT order_id, ts FROM orders ORDER BY ts LIMIT 2;

SELECT customer, n FROM (SELECT customer, COUNT(*) AS n FROM orders GROUP BY customer)
ORDER BY n DESC, customer LIMIT 2;

SELECT order_id, qty FROM orders WHERE qty > 1 ORDER BY qty, order_id DESC LIMIT 4;

CREATE TABLE orders_pt (
  order_id INT,
  customer STRING,
  product STRING,
  amount DECIMAL(10, 2),
  qty INT,
  ts TIMESTAMP(3),
  pt AS PROCTIME()
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/orders.csv',
  'format' = 'csv'
);

SELECT order_id, customer FROM orders_pt WHERE qty > 2 ORDER BY pt, order_id;

SELECT order_id, customer, amount FROM orders ORDER BY amount DESC, order_id LIMIT 3 OFFSET 2;

SELECT customer, n FROM (SELECT customer, COUNT(*) AS n FROM orders GROUP BY customer)
ORDER BY n DESC, customer LIMIT 2 OFFSET 1;
