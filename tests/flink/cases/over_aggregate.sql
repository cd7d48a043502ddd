-- modes: batch streaming
-- description: OVER aggregates on a rowtime (append-only in streaming mode): ROWS and RANGE frames, bounded and unbounded preceding, peers at one time sharing a RANGE result, out-of-order rows within the watermark's delay, several aggregates over one window, a named WINDOW, no PARTITION BY, DISTINCT, LAG (peers share the value before the last of them, as Flink's streaming LAG gives), ROW_NUMBER without a rank filter, a filter over the results; ORDER BY a column that is not a time attribute is refused in streaming mode. Flink's batch mode fails on the RANGE interval and DISTINCT queries (its own errors); Weir's batch mode must give its streaming rows there.
-- batch: as streaming
CREATE TABLE ticks (
  sym STRING,
  price INT,
  qty INT,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/ticks.csv',
  'format' = 'csv',
  'csv.null-literal' = 'null'
);

SELECT sym, price, ts,
  SUM(price) OVER w AS s, COUNT(*) OVER w AS n, MIN(price) OVER w AS lo,
  MAX(price) OVER w AS hi, AVG(price) OVER w AS a
FROM ticks
WINDOW w AS (PARTITION BY sym ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW);

SELECT sym, qty, ts,
  COUNT(*) OVER (PARTITION BY sym ORDER BY ts RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND CURRENT ROW) AS n,
  SUM(qty) OVER (PARTITION BY sym ORDER BY ts RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND CURRENT ROW) AS q,
  MAX(price) OVER (PARTITION BY sym ORDER BY ts RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND CURRENT ROW) AS hi
FROM ticks;

SELECT sym, price, ts, COUNT(*) OVER (PARTITION BY sym ORDER BY ts) AS n,
  SUM(price) OVER (PARTITION BY sym ORDER BY ts) AS s
FROM ticks;

SELECT sym, qty, ts,
  COUNT(*) OVER (PARTITION BY sym ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS n,
  SUM(qty) OVER (PARTITION BY sym ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS q
FROM ticks;

SELECT sym, qty, ts, SUM(qty) OVER (ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS q
FROM ticks WHERE sym <> 'a';

SELECT sym, price, ts,
  COUNT(DISTINCT price) OVER (PARTITION BY sym ORDER BY ts RANGE UNBOUNDED PRECEDING) AS prices
FROM ticks;

SELECT sym, price, ts, LAG(price) OVER (PARTITION BY sym ORDER BY ts) AS previous
FROM ticks;

SELECT sym, price, ts, avg_price FROM (
  SELECT sym, price, ts,
    AVG(CAST(price AS DOUBLE)) OVER (PARTITION BY sym ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS avg_price
  FROM ticks)
WHERE price > avg_price;

SELECT sym, price, SUM(qty) OVER (PARTITION BY sym ORDER BY price ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS q
FROM ticks;

SELECT sym, price, ROW_NUMBER() OVER (PARTITION BY sym ORDER BY ts) AS rn FROM ticks;
