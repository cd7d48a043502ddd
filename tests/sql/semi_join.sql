-- IN (subquery) as a streaming semi join: each order is emitted once, when its customer
-- first qualifies, whichever side arrives first; the emitted marks restore with the state.
CREATE TABLE orders (id BIGINT, customer BIGINT, amount INT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '2000',
  'fields.customer.min' = '1', 'fields.customer.max' = '300',
  'fields.amount.min' = '1', 'fields.amount.max' = '500'
);
CREATE TABLE customers (cid BIGINT, region INT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '200',
  'fields.cid.kind' = 'sequence', 'fields.cid.start' = '1', 'fields.cid.end' = '400',
  'fields.region.min' = '0', 'fields.region.max' = '2'
);
CREATE TABLE picked (id BIGINT, customer BIGINT, amount INT)
WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');

INSERT INTO picked
SELECT id, customer, amount FROM orders
WHERE customer IN (SELECT cid FROM customers WHERE region = 1);
