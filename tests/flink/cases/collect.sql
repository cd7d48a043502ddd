-- modes: batch streaming
-- description: COLLECT into a MULTISET (NULLs skipped, an empty group's is empty), its type (query 2), COLLECT over an updating input (retractions taken back), and in a TUMBLE window.
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

CREATE VIEW tags AS
SELECT * FROM (VALUES
  (1, 'x'), (1, 'y'), (1, 'x'), (2, CAST(NULL AS STRING)), (3, 'z'), (3, CAST(NULL AS STRING))
) AS t(id, tag);

SELECT id, COLLECT(tag) AS tags FROM tags GROUP BY id;

SELECT id, TYPEOF(COLLECT(tag)) AS ty FROM tags GROUP BY id;

SELECT k, COLLECT(v) AS vs FROM events GROUP BY k;

SELECT n, COLLECT(k) AS ks
FROM (SELECT k, COUNT(*) AS n FROM events GROUP BY k)
GROUP BY n;

SELECT window_start, COLLECT(k) AS ks, COLLECT(v > 0) AS positive
FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '5' SECOND))
GROUP BY window_start, window_end;
