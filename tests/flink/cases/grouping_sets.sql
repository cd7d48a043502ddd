-- modes: batch streaming
-- description: GROUPING SETS, ROLLUP and CUBE with GROUPING()/GROUPING_ID() in updating aggregates (streaming: one copy of each row per grouping set, grouped by the keys and the set) and in TUMBLE window aggregates (streaming: append).
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

SELECT customer, product, COUNT(*) AS n, SUM(qty) AS qty
FROM orders
GROUP BY GROUPING SETS ((customer, product), (customer), ());

SELECT customer, product, SUM(amount) AS total, GROUPING(customer) AS gc, GROUPING(product) AS gp
FROM orders
GROUP BY ROLLUP (customer, product);

SELECT customer, product, COUNT(*) AS n, GROUPING_ID(customer, product) AS gid
FROM orders
WHERE qty > 1
GROUP BY CUBE (customer, product);

SELECT window_start, window_end, customer, product, COUNT(*) AS n, MAX(qty) AS max_qty
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end, GROUPING SETS ((customer, product), (customer), ());

SELECT window_start, window_end, product, SUM(qty) AS qty
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '10' MINUTES))
GROUP BY window_start, window_end, ROLLUP (product);
