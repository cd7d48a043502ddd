-- Joins over updating inputs: a table joined with per-customer totals (a GROUP BY, with
-- an extra condition in ON), two updating inputs joined (totals and each customer's latest
-- order, a deduplication), an aggregate over such a join's changelog, a LEFT JOIN whose
-- rows go from NULL-padded to matched and back as totals change, a FULL JOIN of two
-- filtered updating inputs, and semi / anti joins whose subquery updates (a customer's
-- latest order moves in and out of the subquery's filter).
CREATE TABLE orders (id BIGINT, customer BIGINT, amount INT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '3000',
  'fields.customer.min' = '1', 'fields.customer.max' = '120',
  'fields.amount.min' = '1', 'fields.amount.max' = '500'
);
CREATE TABLE customers (id BIGINT, budget INT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '100',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '150',
  'fields.budget.min' = '2000', 'fields.budget.max' = '14000'
);
CREATE VIEW totals AS
SELECT customer, COUNT(*) AS n, CAST(SUM(amount) AS INT) AS spent FROM orders GROUP BY customer;
CREATE VIEW latest AS
SELECT customer, id, amount FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY customer ORDER BY id DESC) AS rn FROM orders)
WHERE rn = 1;

CREATE TABLE over_budget (customer BIGINT, budget INT, spent INT)
WITH ('connector' = 'filesystem', 'path' = '${out}/over_budget', 'format' = 'debezium-json');
CREATE TABLE with_latest (customer BIGINT, n BIGINT, last_id BIGINT, last_amount INT)
WITH ('connector' = 'filesystem', 'path' = '${out}/with_latest', 'format' = 'debezium-json');
CREATE TABLE summary (customers BIGINT, orders BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/summary', 'format' = 'debezium-json');

INSERT INTO over_budget
SELECT c.id, c.budget, t.spent
FROM customers AS c JOIN totals AS t ON c.id = t.customer AND t.spent > c.budget;

INSERT INTO with_latest
SELECT t.customer, t.n, l.id, l.amount FROM totals AS t JOIN latest AS l ON t.customer = l.customer;

INSERT INTO summary
SELECT COUNT(*), SUM(t.n) FROM customers AS c JOIN totals AS t ON c.id = t.customer;

CREATE TABLE customer_totals (customer BIGINT, n BIGINT, spent INT)
WITH ('connector' = 'filesystem', 'path' = '${out}/customer_totals', 'format' = 'debezium-json');
CREATE TABLE busy_or_big (customer BIGINT, n BIGINT, big_order BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/busy_or_big', 'format' = 'debezium-json');

INSERT INTO customer_totals
SELECT c.id, t.n, t.spent
FROM customers AS c LEFT JOIN totals AS t ON c.id = t.customer AND t.n > 20;

INSERT INTO busy_or_big
SELECT COALESCE(t.customer, l.customer), t.n, l.id
FROM (SELECT * FROM totals WHERE n >= 25) AS t
FULL JOIN (SELECT * FROM latest WHERE amount > 400) AS l ON t.customer = l.customer;

CREATE TABLE big_latest (id BIGINT, budget INT)
WITH ('connector' = 'filesystem', 'path' = '${out}/big_latest', 'format' = 'debezium-json');
CREATE TABLE no_big_latest (id BIGINT, budget INT)
WITH ('connector' = 'filesystem', 'path' = '${out}/no_big_latest', 'format' = 'debezium-json');

INSERT INTO big_latest
SELECT id, budget FROM customers
WHERE id IN (SELECT customer FROM latest WHERE amount > 400);

INSERT INTO no_big_latest
SELECT id, budget FROM customers AS c
WHERE NOT EXISTS (SELECT 1 FROM latest AS l WHERE l.customer = c.id AND l.amount > 400);
