-- modes: batch streaming
-- set: table.local-time-zone=Asia/Shanghai
-- description: table.local-time-zone = Asia/Shanghai (UTC+8): TIMESTAMP_LTZ values are instants (shown here in UTC), casts between TIMESTAMP_LTZ and STRING, TIMESTAMP and DATE use the session zone, as do FROM_UNIXTIME, UNIX_TIMESTAMP, DATE_FORMAT of a TIMESTAMP_LTZ and LOCALTIMESTAMP. Query 3: a day TUMBLE over a TIMESTAMP_LTZ rowtime starts at local midnight.
CREATE VIEW v AS
SELECT * FROM (VALUES
  (1, TIMESTAMP '2024-01-01 00:30:00', CAST(1704069000 AS BIGINT), '2024-01-01 08:00:00'),
  (2, TIMESTAMP '2024-06-30 23:59:59', CAST(0 AS BIGINT), '1970-01-01 08:00:00')
) AS t(id, ts, epoch, s);

CREATE TABLE events (
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

SELECT
  id,
  TO_TIMESTAMP_LTZ(epoch, 0) AS instant,
  CAST(TO_TIMESTAMP_LTZ(epoch, 0) AS STRING) AS ltz_text,
  CAST(TO_TIMESTAMP_LTZ(epoch, 0) AS TIMESTAMP(3)) AS ltz_local,
  CAST(TO_TIMESTAMP_LTZ(epoch, 0) AS DATE) AS ltz_date,
  CAST(ts AS TIMESTAMP_LTZ(3)) AS ts_instant,
  CAST(s AS TIMESTAMP_LTZ(3)) AS s_instant,
  FROM_UNIXTIME(epoch) AS from_unix,
  UNIX_TIMESTAMP(s) AS unix_ts,
  UNIX_TIMESTAMP(s, 'yyyy-MM-dd HH:mm:ss') AS unix_ts_fmt,
  DATE_FORMAT(TO_TIMESTAMP_LTZ(epoch, 0), 'yyyy-MM-dd HH:mm') AS formatted
FROM v;

SELECT TIMESTAMPDIFF(MINUTE, LOCALTIMESTAMP, CAST(CURRENT_TIMESTAMP AS TIMESTAMP(3))) AS drift;

SELECT window_start, window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '1' DAY))
GROUP BY window_start, window_end;

SELECT k, v, CAST(ts AS STRING) AS local_text FROM events WHERE v > 9;
