-- Left and full outer joins: rows without a match are emitted padded with NULLs and
-- retracted when a match arrives (a changelog, written as debezium-json).
CREATE TABLE orders (id BIGINT, customer BIGINT, amount INT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '2000',
  'fields.customer.min' = '1', 'fields.customer.max' = '400',
  'fields.amount.min' = '1', 'fields.amount.max' = '500'
);
CREATE TABLE customers (cid BIGINT, region INT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '200',
  'fields.cid.kind' = 'sequence', 'fields.cid.start' = '150', 'fields.cid.end' = '550',
  'fields.region.min' = '0', 'fields.region.max' = '4'
);
CREATE TABLE with_region (id BIGINT, customer BIGINT, amount INT, region INT)
WITH ('connector' = 'filesystem', 'path' = '${out}/left', 'format' = 'debezium-json');
CREATE TABLE everything (id BIGINT, cid BIGINT, region INT)
WITH ('connector' = 'filesystem', 'path' = '${out}/full', 'format' = 'debezium-json');

INSERT INTO with_region
SELECT o.id, o.customer, o.amount, c.region
FROM orders o LEFT JOIN customers c ON o.customer = c.cid AND c.region <> 2;

INSERT INTO everything
SELECT o.id, c.cid, c.region
FROM (SELECT * FROM orders WHERE amount > 450) o
FULL JOIN customers c ON o.customer = c.cid;
