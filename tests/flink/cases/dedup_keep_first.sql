-- modes: batch streaming
-- description: deduplication on a rowtime: keep-first (ROW_NUMBER ... ORDER BY ts ASC = 1) and keep-last (ORDER BY ts DESC = 1); records Flink's changelog mode of each.
CREATE TABLE events (
  k STRING,
  v INT,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/events.csv',
  'format' = 'csv'
);

SELECT k, v, ts
FROM (
  SELECT k, v, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts ASC) AS rn
  FROM events
)
WHERE rn = 1;

SELECT k, v, ts
FROM (
  SELECT k, v, ts, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn
  FROM events
)
WHERE rn = 1;
