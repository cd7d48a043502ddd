-- Session windows (legacy GROUP BY SESSION) with a legacy tumbling window beside them:
-- every 50 events time jumps 3 s, which closes each user's session (gap 2 s). The
-- sessions' COUNT(DISTINCT …) of strings must survive checkpoints taken mid-session.
CREATE TABLE clicks (
  id BIGINT,
  u AS id % 7,
  ts AS TO_TIMESTAMP_LTZ(id * 100 + (id / 50) * 3000, 3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '3000'
);
CREATE TABLE sessions (u BIGINT, s TIMESTAMP(3), e TIMESTAMP(3), n BIGINT, lo BIGINT, hi BIGINT, d BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/sessions', 'format' = 'json');
CREATE TABLE minutes (u BIGINT, s TIMESTAMP(3), r TIMESTAMP(3), n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/minutes', 'format' = 'json');

INSERT INTO sessions
SELECT u, SESSION_START(ts, INTERVAL '2' SECOND), SESSION_END(ts, INTERVAL '2' SECOND),
       COUNT(*), MIN(id), MAX(id), COUNT(DISTINCT CAST(id / 7 % 5 AS STRING))
FROM clicks
GROUP BY u, SESSION(ts, INTERVAL '2' SECOND);

INSERT INTO minutes
SELECT u, TUMBLE_START(ts, INTERVAL '1' MINUTE), TUMBLE_ROWTIME(ts, INTERVAL '1' MINUTE), COUNT(*)
FROM clicks
GROUP BY u, TUMBLE(ts, INTERVAL '1' MINUTE);

-- The SESSION window TVF, per user (PARTITION BY) and over all users: the per-user rows
-- must equal the legacy ones above.
CREATE TABLE tvf_sessions (k STRING, u BIGINT, s TIMESTAMP(3), e TIMESTAMP(3), n BIGINT, lo BIGINT, hi BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/tvf_sessions', 'format' = 'json');

INSERT INTO tvf_sessions
SELECT 'per-user', u, window_start, window_end, COUNT(*), MIN(id), MAX(id)
FROM TABLE(SESSION(TABLE clicks PARTITION BY u, DESCRIPTOR(ts), INTERVAL '2' SECOND))
GROUP BY u, window_start, window_end;

INSERT INTO tvf_sessions
SELECT 'all', CAST(NULL AS BIGINT), w.window_start, w.window_end, COUNT(*), MIN(id), MAX(id)
FROM TABLE(SESSION(TABLE clicks, DESCRIPTOR(ts), INTERVAL '2' SECOND)) AS w
GROUP BY w.window_start, w.window_end
HAVING MAX(id) - MIN(id) >= 0;
