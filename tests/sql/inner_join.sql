-- Regular inner equi-join of two append-only streams, with an extra condition; the join
-- state is keyed and restores at another parallelism.
CREATE TABLE orders (id BIGINT, customer BIGINT, amount INT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '2000',
  'fields.customer.min' = '1', 'fields.customer.max' = '300',
  'fields.amount.min' = '1', 'fields.amount.max' = '500'
);
CREATE TABLE customers (cid BIGINT, region INT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '300',
  'fields.cid.kind' = 'sequence', 'fields.cid.start' = '1', 'fields.cid.end' = '400',
  'fields.region.min' = '0', 'fields.region.max' = '4'
);
CREATE TABLE enriched (id BIGINT, customer BIGINT, amount INT, region INT)
WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');

INSERT INTO enriched
SELECT o.id, o.customer, o.amount, c.region
FROM orders o JOIN customers c ON o.customer = c.cid AND o.amount > c.region * 50
WHERE c.region <> 3;
