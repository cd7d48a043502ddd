-- GROUPING SETS, ROLLUP and CUBE: rows expanded once per grouping set before the exchange
-- (Flink's Expand), grouped by the keys and the set. An updating ROLLUP written as a
-- debezium-json changelog, and a TUMBLE window aggregate over CUBE with GROUPING_ID;
-- keyed state restored at p=3.
CREATE TABLE clicks (
  seq BIGINT,
  user_id INT,
  amount INT,
  ts AS TO_TIMESTAMP_LTZ(1717200000000 + seq * 37, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1500',
  'fields.seq.kind' = 'sequence', 'fields.seq.start' = '0', 'fields.seq.end' = '3999',
  'fields.user_id.min' = '1', 'fields.user_id.max' = '7',
  'fields.amount.min' = '1', 'fields.amount.max' = '100'
);

CREATE TABLE levels (user_id INT, big BOOLEAN, clicks BIGINT, total BIGINT, g BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/levels', 'format' = 'debezium-json');

CREATE TABLE windows (
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  user_id INT,
  parity INT,
  clicks BIGINT,
  top INT,
  gid BIGINT
) WITH ('connector' = 'filesystem', 'path' = '${out}/windows', 'format' = 'json');

INSERT INTO levels
SELECT user_id, amount > 50 AS big, COUNT(*), SUM(amount), GROUPING(user_id)
FROM clicks
GROUP BY ROLLUP (user_id, amount > 50);

INSERT INTO windows
SELECT window_start, window_end, user_id, MOD(amount, 2) AS parity, COUNT(*), MAX(amount),
       GROUPING_ID(user_id, MOD(amount, 2))
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '30' SECOND))
GROUP BY window_start, window_end, CUBE (user_id, MOD(amount, 2));
