-- UNNEST in FROM (CROSS JOIN … WITH ORDINALITY) feeding an event-time TUMBLE aggregate per
-- element: rows expanded before the exchange, the rowtime kept through the expansion,
-- keyed window state restored at p=3.
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

CREATE TABLE per_tag (
  tag STRING,
  pos INT,
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  clicks BIGINT,
  total BIGINT
) WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');

CREATE VIEW tagged AS
SELECT c.ts, c.amount, u.tag, u.pos
FROM clicks c
CROSS JOIN UNNEST(SPLIT(CONCAT('u', CAST(c.user_id AS STRING), ',a', CAST(MOD(c.amount, 3) AS STRING)), ','))
  WITH ORDINALITY AS u(tag, pos);

INSERT INTO per_tag
SELECT tag, pos, window_start, window_end, COUNT(*), SUM(amount)
FROM TABLE(TUMBLE(TABLE tagged, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY tag, pos, window_start, window_end;
