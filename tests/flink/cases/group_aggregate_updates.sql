-- modes: batch streaming
-- description: updating aggregates over 20,000 generated rows, each group updated hundreds of times across many batches: COUNT, SUM, AVG, MIN, MAX of integers, doubles, decimals, strings and timestamps, FILTER, a NULL key, two keys with HAVING, a global aggregate.
CREATE TABLE seq (id BIGINT) WITH (
  'connector' = 'datagen',
  'rows-per-second' = '20000',
  'number-of-rows' = '20000',
  'fields.id.kind' = 'sequence',
  'fields.id.start' = '1',
  'fields.id.end' = '20000'
);

CREATE VIEW v AS
SELECT
  id,
  CASE WHEN id % 53 = 0 THEN CAST(NULL AS INT) ELSE CAST(id % 41 AS INT) END AS k,
  CAST(id % 3 AS INT) AS k2,
  CAST((id * 7919) % 1000 AS INT) AS amount,
  CAST((id * 7919) % 1000 AS DOUBLE) / 8 AS ratio,
  CAST((id * 104729) % 100000 AS DECIMAL(10, 2)) AS price,
  CONCAT('s', CAST((id * 31) % 997 AS STRING)) AS label,
  TIMESTAMPADD(SECOND, CAST((id * 13) % 86400 AS INT), TIMESTAMP '2024-01-01 00:00:00') AS ts
FROM seq;

SELECT
  k,
  COUNT(*) AS n,
  SUM(amount) AS total,
  AVG(amount) AS avg_amount,
  MIN(amount) AS lo,
  MAX(amount) AS hi,
  AVG(ratio) AS avg_ratio,
  SUM(price) AS sum_price,
  MAX(price) AS max_price,
  MIN(label) AS first_label,
  MAX(label) AS last_label,
  MIN(ts) AS first_ts,
  MAX(ts) AS last_ts,
  COUNT(*) FILTER (WHERE amount > 900) AS big,
  SUM(amount) FILTER (WHERE k2 = 0) AS zeros
FROM v
GROUP BY k;

SELECT k, k2, COUNT(*) AS n, MAX(label) AS last_label
FROM v
GROUP BY k, k2
HAVING COUNT(*) > 159;

SELECT COUNT(*) AS n, SUM(price) AS sum_price, MIN(ts) AS first_ts, MAX(label) AS last_label, AVG(ratio) AS avg_ratio
FROM v;
