-- modes: batch streaming
-- description: GROUP BY aggregates over a csv input, NULL group key, COUNT(DISTINCT), several DISTINCT aggregates with FILTER (batch: expanded into grouping sets, as Flink plans them), HAVING, a global aggregate, a global aggregate of no rows (streaming: updating).
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

CREATE VIEW o AS
SELECT order_id, NULLIF(customer, '') AS customer, NULLIF(product, '') AS product, amount, qty, ts
FROM orders;

SELECT
  customer,
  COUNT(*) AS n,
  COUNT(product) AS n_product,
  SUM(qty) AS qty,
  MIN(amount) AS min_amount,
  MAX(amount) AS max_amount,
  SUM(amount) AS total,
  COUNT(DISTINCT product) AS products
FROM o
GROUP BY customer;

SELECT product, COUNT(*) AS n, SUM(amount) AS total
FROM o
GROUP BY product
HAVING COUNT(*) >= 3;

SELECT COUNT(*) AS n, COUNT(DISTINCT customer) AS customers, SUM(qty) AS qty, MIN(ts) AS first_ts, MAX(ts) AS last_ts
FROM o;

SELECT customer, COUNT(*) AS n, COUNT(DISTINCT product) AS products,
       COUNT(DISTINCT product) FILTER (WHERE qty > 1) AS bulk_products,
       COUNT(DISTINCT qty) AS quantities, SUM(DISTINCT qty) AS distinct_qty_sum
FROM orders
GROUP BY customer;

SELECT COUNT(DISTINCT customer) AS customers, COUNT(DISTINCT product) FILTER (WHERE amount > 5) AS pricey
FROM orders
WHERE qty > 100;
