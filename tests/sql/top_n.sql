-- Top-N and deduplication with ROW_NUMBER(): the three biggest orders of each customer
-- (with their rank), the first order of each customer and the last one (without it);
-- Top-N over updating inputs: the biggest spenders of each region (over a GROUP BY) and
-- the customers whose latest order is biggest (over a deduplication: a customer's
-- latest amount goes down as well as up, so top rows leave and lower rows move up).
CREATE TABLE orders (id BIGINT, customer BIGINT, amount INT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '3000',
  'fields.customer.min' = '1', 'fields.customer.max' = '150',
  'fields.amount.min' = '1', 'fields.amount.max' = '500'
);
CREATE TABLE biggest (customer BIGINT, id BIGINT, amount INT, `rank` BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/biggest', 'format' = 'debezium-json');
CREATE TABLE first_order (customer BIGINT, id BIGINT, amount INT)
WITH ('connector' = 'filesystem', 'path' = '${out}/first', 'format' = 'debezium-json');
CREATE TABLE last_order (customer BIGINT, id BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/last', 'format' = 'debezium-json');

INSERT INTO biggest
SELECT customer, id, amount, rn FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY customer ORDER BY amount DESC, id) AS rn
  FROM orders)
WHERE rn <= 3;

INSERT INTO first_order
SELECT customer, id, amount FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY customer ORDER BY id ASC) AS rn FROM orders)
WHERE rn = 1;

INSERT INTO last_order
SELECT customer, id FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY customer ORDER BY id DESC) AS rn FROM orders)
WHERE rn < 2;
CREATE TABLE top_spenders (region BIGINT, customer BIGINT, total INT, `rank` BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/spenders', 'format' = 'debezium-json');
CREATE TABLE top_latest (region BIGINT, customer BIGINT, amount INT)
WITH ('connector' = 'filesystem', 'path' = '${out}/latest', 'format' = 'debezium-json');

INSERT INTO top_spenders
SELECT region, customer, total, rn FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY region ORDER BY total DESC, customer) AS rn
  FROM (SELECT customer % 5 AS region, customer, CAST(SUM(amount) AS INT) AS total
        FROM orders GROUP BY customer % 5, customer))
WHERE rn <= 2;

INSERT INTO top_latest
SELECT region, customer, amount FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY region ORDER BY amount DESC, customer) AS rn
  FROM (SELECT customer % 5 AS region, customer, amount FROM (
          SELECT *, ROW_NUMBER() OVER (PARTITION BY customer ORDER BY id DESC) AS r FROM orders)
        WHERE r = 1))
WHERE rn <= 3;
