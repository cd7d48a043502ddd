-- OVER aggregates in streaming mode: a ROWS frame per user (with LAG), a RANGE frame per
-- user over a coarse rowtime (rows at one time are peers and share a result), and a
-- running count over every row (no PARTITION BY: one subtask). Rows arrive out of order
-- within the watermark's bound and are taken in time order as the watermark passes them;
-- the waiting rows, the frames and the accumulators are checkpointed state.
CREATE TABLE clicks (
  seq BIGINT,
  user_id INT,
  amount INT,
  ts AS TO_TIMESTAMP_LTZ(1717200000000 + seq * 37 - MOD(seq, 5) * 50, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1500',
  'fields.seq.kind' = 'sequence', 'fields.seq.start' = '0', 'fields.seq.end' = '3999',
  'fields.user_id.min' = '1', 'fields.user_id.max' = '7',
  'fields.amount.min' = '1', 'fields.amount.max' = '1000'
);

CREATE TABLE coarse_clicks (
  seq BIGINT,
  user_id INT,
  amount INT,
  ts AS TO_TIMESTAMP_LTZ((1717200000000 + seq * 37 - MOD(seq, 5) * 50) / 500 * 500, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1500',
  'fields.seq.kind' = 'sequence', 'fields.seq.start' = '0', 'fields.seq.end' = '3999',
  'fields.user_id.min' = '1', 'fields.user_id.max' = '3',
  'fields.amount.min' = '1', 'fields.amount.max' = '1000'
);

CREATE TABLE recent (seq BIGINT, user_id INT, s INT, n BIGINT, hi INT, prev INT)
WITH ('connector' = 'filesystem', 'path' = '${out}/recent', 'format' = 'json');

CREATE TABLE per_second (seq BIGINT, user_id INT, n BIGINT, total INT)
WITH ('connector' = 'filesystem', 'path' = '${out}/per_second', 'format' = 'json');

CREATE TABLE running (seq BIGINT, n BIGINT, total INT)
WITH ('connector' = 'filesystem', 'path' = '${out}/running', 'format' = 'json');

INSERT INTO recent
SELECT seq, user_id, s, n, hi, prev FROM (
  SELECT seq, user_id,
    SUM(amount) OVER w AS s, COUNT(*) OVER w AS n, MAX(amount) OVER w AS hi,
    LAG(amount) OVER (PARTITION BY user_id ORDER BY ts) AS prev
  FROM clicks
  WINDOW w AS (PARTITION BY user_id ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW))
WHERE MOD(seq, 8) = 0;

INSERT INTO per_second
SELECT seq, user_id, n, total FROM (
  SELECT seq, user_id,
    COUNT(*) OVER w AS n, SUM(amount) OVER w AS total
  FROM coarse_clicks
  WINDOW w AS (PARTITION BY user_id ORDER BY ts RANGE BETWEEN INTERVAL '1' SECOND PRECEDING AND CURRENT ROW))
WHERE MOD(seq, 8) = 1;

INSERT INTO running
SELECT seq, n, total FROM (
  SELECT seq, COUNT(*) OVER (ORDER BY ts) AS n, SUM(amount) OVER (ORDER BY ts) AS total
  FROM clicks)
WHERE MOD(seq, 8) = 2;
