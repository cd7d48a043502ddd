-- Top-N and deduplication with ROW_NUMBER(): the three biggest orders of each customer
-- (with their rank), the first order of each customer and the last one (without it).
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
