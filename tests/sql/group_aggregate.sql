-- Updating aggregates (GROUP BY without a window): a changelog of +I/-U/+U rows, written
-- as debezium-json; the second query aggregates the first one's changelog, taking back
-- each retracted row (COUNT over -U/+U pairs), and filters it with HAVING.
CREATE TABLE orders (id BIGINT, customer BIGINT, amount INT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '3000',
  'fields.customer.min' = '1', 'fields.customer.max' = '200',
  'fields.amount.min' = '1', 'fields.amount.max' = '500'
);
CREATE TABLE per_customer (customer BIGINT, orders BIGINT, total BIGINT, big BIGINT, endings BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/per_customer', 'format' = 'debezium-json');
CREATE TABLE histogram (orders BIGINT, customers BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/histogram', 'format' = 'debezium-json');

INSERT INTO per_customer
SELECT customer, COUNT(*), SUM(amount), COUNT(*) FILTER (WHERE amount > 400),
       COUNT(DISTINCT amount % 10)
FROM orders
WHERE amount > 20
GROUP BY customer;

INSERT INTO histogram
SELECT orders, COUNT(*)
FROM (SELECT customer, COUNT(*) AS orders FROM orders GROUP BY customer)
GROUP BY orders
HAVING COUNT(*) > 1;
