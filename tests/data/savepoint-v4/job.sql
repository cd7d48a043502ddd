-- The job whose savepoint is kept in this folder (see tests/savepoint.rs): one source
-- feeding a window aggregate, a window Top-N, an updating aggregate and a deduplication,
-- and a regular join with a second source, so that every kind of keyed state is in it.
CREATE TABLE bids (
  id BIGINT,
  ts AS TO_TIMESTAMP_LTZ(id * 100, 3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '${rate}',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '6000'
);
CREATE TABLE people (pid BIGINT) WITH (
  'connector' = 'datagen', 'rows-per-second' = '20',
  'fields.pid.kind' = 'sequence', 'fields.pid.start' = '0', 'fields.pid.end' = '49'
);
CREATE VIEW keyed AS SELECT id, MOD(id, 13) AS k, MOD(id, 50) AS pk, ts FROM bids;
CREATE VIEW per_window AS
  SELECT window_start, window_end, k, COUNT(*) AS c, SUM(id) AS total, MAX(id) AS top
  FROM TABLE(TUMBLE(TABLE keyed, DESCRIPTOR(ts), INTERVAL '10' SECOND))
  GROUP BY window_start, window_end, k;

CREATE TABLE windows (window_start TIMESTAMP(3), k BIGINT, c BIGINT, total BIGINT, top BIGINT)
  WITH ('connector' = 'print', 'print-identifier' = 'windows');
CREATE TABLE leaders (window_start TIMESTAMP(3), k BIGINT, total BIGINT, rn BIGINT)
  WITH ('connector' = 'print', 'print-identifier' = 'leaders');
CREATE TABLE totals (k BIGINT, c BIGINT, total BIGINT)
  WITH ('connector' = 'print', 'print-identifier' = 'totals');
CREATE TABLE firsts (k BIGINT, id BIGINT)
  WITH ('connector' = 'print', 'print-identifier' = 'firsts');
CREATE TABLE matched (id BIGINT, pid BIGINT)
  WITH ('connector' = 'print', 'print-identifier' = 'matched');

EXECUTE STATEMENT SET BEGIN
INSERT INTO windows SELECT window_start, k, c, total, top FROM per_window;
INSERT INTO leaders
  SELECT window_start, k, total, rn FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY total DESC, k) AS rn
    FROM per_window)
  WHERE rn <= 2;
INSERT INTO totals SELECT k, COUNT(*), SUM(id) FROM keyed GROUP BY k;
INSERT INTO firsts
  SELECT k, id FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts) AS rn FROM keyed)
  WHERE rn = 1;
INSERT INTO matched SELECT b.id, p.pid FROM keyed b JOIN people p ON b.pk = p.pid
  WHERE MOD(b.id, 7) = 0;
END;
