-- modes: streaming
-- description: event-time temporal joins (FOR SYSTEM_TIME AS OF the probe side's rowtime) against a versioned table (a PRIMARY KEY and a watermark) and against a versioned view (a deduplication keeping each key's last row): each order joins the rate valid at its time (the version with the latest time at or before it); inner joins drop orders before their currency's first version, left joins keep them with NULLs; append-only output. (Flink's filesystem tables cannot be looked up, so Weir's lookup joins are tested in tests/lookup.rs.)
CREATE TABLE orders (
  order_id INT,
  currency STRING,
  amount INT,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/fx_orders.csv',
  'format' = 'csv'
);

CREATE TABLE rates (
  currency STRING,
  rate INT,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND,
  PRIMARY KEY (currency) NOT ENFORCED
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/fx_rates.csv',
  'format' = 'csv'
);

CREATE TABLE rates_log (
  currency STRING,
  rate INT,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/fx_rates.csv',
  'format' = 'csv'
);

CREATE VIEW versioned_rates AS
SELECT currency, rate, ts FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY currency ORDER BY ts DESC) AS rn FROM rates_log)
WHERE rn = 1;

SELECT o.order_id, o.currency, o.amount * r.rate AS converted, r.rate, o.ts
FROM orders AS o
JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r
ON o.currency = r.currency;

SELECT o.order_id, r.rate, r.ts AS rate_time
FROM orders AS o
LEFT JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r
ON o.currency = r.currency;

SELECT o.order_id, r.rate
FROM orders AS o
JOIN versioned_rates FOR SYSTEM_TIME AS OF o.ts AS r
ON o.currency = r.currency;

SELECT o.order_id, r.rate
FROM orders AS o
JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r
ON o.currency = r.currency AND o.amount > 4;

SELECT o.order_id, r.rate
FROM orders AS o
JOIN rates_log FOR SYSTEM_TIME AS OF o.ts AS r
ON o.currency = r.currency;
