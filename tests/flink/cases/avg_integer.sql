-- modes: batch streaming
-- description: AVG of an integer column has the column's integer type (truncated toward zero); AVG of DOUBLE/DECIMAL does not truncate.
CREATE VIEW s AS
SELECT * FROM (VALUES
  (CAST('x' AS STRING), 1, CAST(10 AS BIGINT)),
  ('x', 2, CAST(-3 AS BIGINT)),
  ('x', 2, CAST(4 AS BIGINT)),
  ('y', -1, CAST(-1 AS BIGINT)),
  ('y', -2, CAST(-2 AS BIGINT)),
  ('y', 0, CAST(0 AS BIGINT)),
  ('z', 7, CAST(NULL AS BIGINT)),
  ('z', CAST(NULL AS INT), CAST(5 AS BIGINT)),
  ('w', CAST(NULL AS INT), CAST(NULL AS BIGINT))
) AS t(grp, a, b);

SELECT
  AVG(a) AS avg_a,
  AVG(b) AS avg_b,
  AVG(CAST(a AS DOUBLE)) AS avg_a_dbl,
  AVG(CAST(b AS DOUBLE)) AS avg_b_dbl,
  SUM(a) AS sum_a,
  COUNT(a) AS cnt_a,
  COUNT(*) AS cnt
FROM s;

SELECT
  grp,
  AVG(a) AS avg_a,
  AVG(b) AS avg_b,
  AVG(CAST(a AS DOUBLE)) AS avg_a_dbl,
  AVG(CAST(a AS DECIMAL(10, 2))) AS avg_a_dec,
  AVG(CAST(a AS SMALLINT)) AS avg_a_small
FROM s
GROUP BY grp;
