-- Interval join: payments within three seconds after their order. The join bounds the
-- time difference of the two event-time columns, so each side's rows leave the join state
-- once the watermark makes a match impossible.
CREATE TABLE orders (
  id BIGINT, amount INT, ts AS TO_TIMESTAMP_LTZ(id * 20, 3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '2000',
  'fields.amount.min' = '1', 'fields.amount.max' = '100'
);
CREATE TABLE payments (
  pid BIGINT, oid AS (pid * 7) % 2000 + 1, pts AS TO_TIMESTAMP_LTZ(pid * 20, 3),
  WATERMARK FOR pts AS pts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000',
  'fields.pid.kind' = 'sequence', 'fields.pid.start' = '1', 'fields.pid.end' = '2000'
);
CREATE TABLE paid (id BIGINT, amount INT, pid BIGINT, delay_ms BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');

INSERT INTO paid
SELECT o.id, o.amount, p.pid, p.pid * 20 - o.id * 20
FROM orders o JOIN payments p
  ON o.id = p.oid AND p.pts BETWEEN o.ts AND o.ts + INTERVAL '3' SECOND;
