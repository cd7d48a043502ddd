-- modes: batch streaming
-- description: CURRENT_WATERMARK on TIMESTAMP(3) and TIMESTAMP_LTZ(3) rowtimes: its type, and the late-row filter Flink documents (over in-order rows, so no row is late whenever watermarks arrive). Query 3: an argument that is not a rowtime attribute is refused.
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

CREATE TABLE events_ltz (
  k STRING,
  v INT,
  t TIMESTAMP(3),
  ts AS CAST(t AS TIMESTAMP_LTZ(3)),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/events.csv',
  'format' = 'csv'
);

SELECT k, v, TYPEOF(CURRENT_WATERMARK(ts)) AS wm_type
FROM events
WHERE CURRENT_WATERMARK(ts) IS NULL OR ts >= CURRENT_WATERMARK(ts);

SELECT k, v, TYPEOF(CURRENT_WATERMARK(ts)) AS wm_type
FROM events_ltz
WHERE CURRENT_WATERMARK(ts) IS NULL OR ts >= CURRENT_WATERMARK(ts);

SELECT k, CURRENT_WATERMARK(v) FROM events;
