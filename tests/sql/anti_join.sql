-- Anti joins (NOT EXISTS): orders of customers that never appear in the other stream,
-- emitted on arrival and retracted when a match arrives (a changelog), also with an
-- extra condition; NOT IN over columns that may be NULL (null-aware): an order with a
-- NULL key is retracted once the other side has a row, and every order once the other
-- side has a NULL (that result ends empty).
CREATE TABLE orders (
  id BIGINT, customer BIGINT, amount INT,
  ck AS CASE WHEN id % 9 = 0 THEN CAST(NULL AS BIGINT) ELSE customer END
) WITH (
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

CREATE TABLE maybe_blocked (cid BIGINT, c AS CASE WHEN cid % 97 = 0 THEN CAST(NULL AS BIGINT) ELSE cid END)
WITH (
  'connector' = 'datagen', 'rows-per-second' = '150',
  'fields.cid.kind' = 'sequence', 'fields.cid.start' = '100', 'fields.cid.end' = '400'
);
CREATE TABLE not_in_blocked (id BIGINT, ck BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/not_in', 'format' = 'debezium-json');
CREATE TABLE not_in_maybe (id BIGINT, ck BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/not_in_maybe', 'format' = 'debezium-json');

INSERT INTO not_in_blocked
SELECT id, ck FROM orders WHERE ck NOT IN (SELECT cid FROM blocked);

INSERT INTO not_in_maybe
SELECT id, ck FROM orders WHERE ck NOT IN (SELECT c FROM maybe_blocked);
