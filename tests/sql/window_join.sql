-- Window join: per-window aggregates of two streams joined on their window bounds. The
-- join recognises the window and drops a window's rows once the watermark passes its end,
-- while later windows keep joining.
CREATE TABLE clicks (
  id BIGINT, u AS id % 5, ts AS TO_TIMESTAMP_LTZ(id * 10, 3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '3000'
);
CREATE TABLE views (
  vid BIGINT, u AS vid % 7, ts AS TO_TIMESTAMP_LTZ(vid * 15, 3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '700',
  'fields.vid.kind' = 'sequence', 'fields.vid.start' = '1', 'fields.vid.end' = '2000'
);
CREATE TABLE joined (u BIGINT, window_start TIMESTAMP(3), clicks BIGINT, views BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');

INSERT INTO joined
SELECT c.u, c.window_start, c.n, v.n
FROM (
  SELECT u, window_start, window_end, COUNT(*) AS n
  FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '2' SECOND))
  GROUP BY u, window_start, window_end
) c
JOIN (
  SELECT u, window_start, window_end, COUNT(*) AS n
  FROM TABLE(TUMBLE(TABLE views, DESCRIPTOR(ts), INTERVAL '2' SECOND))
  GROUP BY u, window_start, window_end
) v
ON c.u = v.u AND c.window_start = v.window_start AND c.window_end = v.window_end;
