-- Event-time temporal joins: each order joins the rate of its currency valid at the
-- order's time (the latest version at or before it), from a versioned table (a PRIMARY
-- KEY and a watermark) and, as a LEFT join, from a versioned view (a deduplication keeping
-- each currency's last rate). Orders wait for the watermark; versions older than the one
-- valid at the watermark are dropped. Both are checkpointed state.
-- batch: skip (temporal joins run in streaming mode only, as in Flink)
CREATE TABLE orders (
  seq BIGINT,
  amount INT,
  currency AS CAST(MOD(seq * 7, 6) AS INT),
  ts AS TO_TIMESTAMP_LTZ(1717200000000 + seq * 37 - MOD(seq, 5) * 50, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1500',
  'fields.seq.kind' = 'sequence', 'fields.seq.start' = '0', 'fields.seq.end' = '3999',
  'fields.amount.min' = '1', 'fields.amount.max' = '100'
);

CREATE TABLE rates (
  n BIGINT,
  rate INT,
  currency INT,
  ts AS TO_TIMESTAMP_LTZ(1717200000000 + n * 250, 3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND,
  PRIMARY KEY (currency) NOT ENFORCED
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '100000',
  'fields.n.kind' = 'sequence', 'fields.n.start' = '0', 'fields.n.end' = '599',
  'fields.rate.min' = '1', 'fields.rate.max' = '1000',
  'fields.currency.min' = '0', 'fields.currency.max' = '4'
);

-- The view's versions of a currency come from one datagen split (n odd or even) when the
-- job starts at parallelism 1 or 2 (a restore keeps the splits it started with), so they
-- reach the deduplication in time order: it ignores a row older than the one it keeps,
-- which would make the versions depend on how the splits interleave. Started at 3, the
-- splits cut across currencies and the results vary from run to run.
CREATE TABLE rates_log (
  n BIGINT,
  rate INT,
  currency AS CAST(1 + 2 * MOD(n, 2) AS INT),
  ts AS TO_TIMESTAMP_LTZ(1717200000000 + n * 250, 3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '100000',
  'fields.n.kind' = 'sequence', 'fields.n.start' = '0', 'fields.n.end' = '599',
  'fields.rate.min' = '1', 'fields.rate.max' = '1000'
);

CREATE VIEW latest_rates AS
SELECT currency, rate, n, ts FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY currency ORDER BY ts DESC) AS rn FROM rates_log)
WHERE rn = 1;

CREATE TABLE converted (seq BIGINT, currency INT, amount INT, rate INT, version BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/converted', 'format' = 'json');

CREATE TABLE padded (seq BIGINT, currency INT, rate INT, version BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/padded', 'format' = 'json');

INSERT INTO converted
SELECT o.seq, o.currency, o.amount, r.rate, r.n
FROM orders AS o
JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency
WHERE MOD(o.seq, 4) = 0;

INSERT INTO padded
SELECT o.seq, o.currency, r.rate, r.n
FROM orders AS o
LEFT JOIN latest_rates FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency
WHERE MOD(o.seq, 4) = 1;
