-- modes: batch streaming
-- description: exact numeric literals are DECIMAL (0.1 + 0.2 = 0.3 holds); integer division truncates; DECIMAL arithmetic result types; INT overflow wraps.
CREATE TABLE nums (
  id INT,
  i INT,
  d DECIMAL(5, 2),
  x DOUBLE
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/nums.csv',
  'format' = 'csv'
);

SELECT
  0.1 + 0.2 = 0.3 AS eq,
  0.1 + 0.2 AS s,
  CAST(1.255 AS DECIMAL(4, 2)) AS c,
  1.5 * 2 AS m,
  10 / 4 AS idiv,
  10.0 / 4 AS ddiv,
  1 / 3.0 AS third,
  -7 / 2 AS neg_idiv,
  MOD(-7, 2) AS md,
  2.50 AS lit,
  0.1e0 + 0.2e0 AS dbl,
  0.1e0 + 0.2e0 = 0.3e0 AS dbl_eq;

SELECT
  id,
  i / 4 AS q,
  i * 1.5 AS m,
  i + 1 AS inc,
  d * 2 AS d2,
  d + 0.1 AS dp,
  d / 3 AS d3,
  d * d AS dd,
  x + 0.1 AS xp,
  CAST(d AS DOUBLE) AS d_dbl,
  ROUND(d, 1) AS r1
FROM nums;

SELECT SUM(d) AS sum_d, AVG(d) AS avg_d, MIN(d) AS min_d, SUM(x) AS sum_x, SUM(i * 1.5) AS sum_m FROM nums;
