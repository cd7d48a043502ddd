-- modes: batch streaming
-- description: window Top-N over a window aggregate, window Top-N and window deduplication over a window TVF: append-only in streaming mode, as Flink plans them, each window emitted once when the watermark passes its end.
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

SELECT window_start, window_end, k, total, rn
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY total DESC) AS rn
  FROM (
    SELECT window_start, window_end, k, SUM(v) AS total
    FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '5' SECOND))
    GROUP BY window_start, window_end, k
  )
)
WHERE rn <= 2;

SELECT window_start, window_end, k, v, ts
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY v DESC) AS rn
  FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '5' SECOND))
)
WHERE rn <= 1;

SELECT window_start, window_end, k, v, ts
FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end, k ORDER BY ts ASC) AS rn
  FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '5' SECOND))
)
WHERE rn = 1;
