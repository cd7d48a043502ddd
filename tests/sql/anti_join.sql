-- Anti joins (NOT EXISTS): orders of customers that never appear in the other stream,
-- emitted on arrival and retracted when a match arrives (a changelog), also with an
-- extra condition.
CREATE TABLE orders (id BIGINT, customer BIGINT, amount INT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '2000',
  'fields.customer.min' = '1', 'fields.customer.max' = '400',
  'fields.amount.min' = '1', 'fields.amount.max' = '500'
);
CREATE TABLE blocked (cid BIGINT, level INT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '150',
  'fields.cid.kind' = 'sequence', 'fields.cid.start' = '100', 'fields.cid.end' = '400',
  'fields.level.min' = '0', 'fields.level.max' = '9'
);
CREATE TABLE allowed (id BIGINT, customer BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/allowed', 'format' = 'debezium-json');
CREATE TABLE small_allowed (id BIGINT, amount INT)
WITH ('connector' = 'filesystem', 'path' = '${out}/small', 'format' = 'debezium-json');

INSERT INTO allowed
SELECT id, customer FROM orders o
WHERE NOT EXISTS (SELECT 1 FROM blocked b WHERE b.cid = o.customer);

INSERT INTO small_allowed
SELECT id, amount FROM orders o
WHERE NOT EXISTS (SELECT 1 FROM blocked b WHERE b.cid = o.customer AND b.level > o.amount / 50);
