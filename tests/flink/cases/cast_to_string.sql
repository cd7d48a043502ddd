-- modes: batch streaming
-- description: CAST to STRING of BOOLEAN, TIMESTAMP(3), TIMESTAMP(0), DATE, DECIMAL and DOUBLE; CAST from STRING; a failing CAST fails the query, TRY_CAST gives NULL.
CREATE TABLE casts (
  id INT,
  ts3 TIMESTAMP(3),
  ts0 TIMESTAMP(0),
  d DATE,
  amt DECIMAL(6, 2)
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/casts.csv',
  'format' = 'csv'
);

SELECT
  CAST(TRUE AS STRING) AS t,
  CAST(FALSE AS STRING) AS f,
  CAST(1.0E0 AS STRING) AS one_dbl,
  CAST(0.1E0 AS STRING) AS tenth_dbl,
  CAST(1.0E20 AS STRING) AS big_dbl,
  CAST(1.50 AS STRING) AS dec_lit,
  CAST(42 AS STRING) AS int_lit,
  CAST('12' AS INT) + 1 AS plus,
  CAST(' 12 ' AS INT) AS padded,
  TRY_CAST('abc' AS INT) AS try_bad;

SELECT
  id,
  CAST(ts3 AS STRING) AS ts3_s,
  CAST(ts0 AS STRING) AS ts0_s,
  CAST(d AS STRING) AS d_s,
  CAST(amt AS STRING) AS amt_s,
  CONCAT('v=', CAST(amt AS STRING)) AS concat_s
FROM casts;

SELECT CAST('abc' AS INT) AS bad;
