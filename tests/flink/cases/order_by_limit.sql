-- modes: batch streaming
-- description: ORDER BY … LIMIT n (streaming: an updating Top-N over the whole input, as Flink's SortLimit), over an append-only table, on the rowtime, and over an updating aggregate.
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
