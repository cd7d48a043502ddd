-- modes: batch streaming
-- description: Top-N with ROW_NUMBER (deterministic order keys), RANK with ties, a global Top-N, and rank ranges (BETWEEN, = n: the rows above are kept but not output) (streaming: updating).
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

SELECT customer, order_id, amount, rn
FROM (
  SELECT customer, order_id, amount,
    ROW_NUMBER() OVER (PARTITION BY customer ORDER BY amount DESC, order_id ASC) AS rn
  FROM orders
)
WHERE rn <= 2;

SELECT product, order_id, amount
FROM (
  SELECT product, order_id, amount,
    RANK() OVER (PARTITION BY product ORDER BY amount DESC) AS rk
  FROM orders
)
WHERE rk <= 2;

SELECT order_id, amount, rn
FROM (
  SELECT order_id, amount, ROW_NUMBER() OVER (ORDER BY amount DESC, order_id DESC) AS rn
  FROM orders
)
WHERE rn <= 3;

SELECT customer, order_id, amount, rn
FROM (
  SELECT customer, order_id, amount,
    ROW_NUMBER() OVER (PARTITION BY customer ORDER BY amount DESC, order_id ASC) AS rn
  FROM orders
)
WHERE rn BETWEEN 2 AND 3;

SELECT order_id, amount
FROM (
  SELECT order_id, amount, ROW_NUMBER() OVER (ORDER BY amount DESC, order_id DESC) AS rn
  FROM orders
)
WHERE rn = 2;
