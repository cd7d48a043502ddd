-- modes: batch streaming
-- description: timestamp arithmetic, FLOOR/CEIL to a unit, DATE_FORMAT, date part functions, parsing and epoch conversions (table.local-time-zone = UTC).
CREATE TABLE times (
  id INT,
  ts TIMESTAMP(3)
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/times.csv',
  'format' = 'csv'
);

SELECT
  id,
  TIMESTAMPADD(HOUR, 5, ts) AS plus_5h,
  TIMESTAMPADD(MONTH, 1, ts) AS plus_1mon,
  TIMESTAMPDIFF(DAY, ts, TIMESTAMP '2024-03-01 00:00:00') AS days_to_mar,
  TIMESTAMPDIFF(MINUTE, TIMESTAMP '2024-01-01 00:00:00', ts) AS minutes,
  FLOOR(ts TO HOUR) AS floor_hour,
  CEIL(ts TO DAY) AS ceil_day,
  DATE_FORMAT(ts, 'yyyy-MM-dd HH:mm') AS formatted
FROM times;

SELECT
  id,
  YEAR(ts) AS y,
  QUARTER(ts) AS q,
  MONTH(ts) AS mon,
  WEEK(ts) AS wk,
  DAYOFYEAR(ts) AS doy,
  DAYOFMONTH(ts) AS dom,
  DAYOFWEEK(ts) AS dow,
  EXTRACT(DOW FROM ts) AS extract_dow,
  HOUR(ts) AS h,
  MINUTE(ts) AS mi,
  SECOND(ts) AS sec
FROM times;

SELECT
  TO_DATE('2024-02-29') AS to_date,
  TO_TIMESTAMP('2024-01-01 10:00:00') AS to_ts,
  TO_TIMESTAMP('2024-01-01', 'yyyy-MM-dd') AS to_ts_fmt,
  UNIX_TIMESTAMP('2024-01-01 00:00:00') AS unix_ts,
  FROM_UNIXTIME(0) AS from_unix,
  FROM_UNIXTIME(1709210096, 'yyyy-MM-dd') AS from_unix_fmt,
  DATE '2024-01-31' + INTERVAL '1' MONTH AS plus_month,
  TIMESTAMP '2024-01-01 00:00:00' - INTERVAL '1' SECOND AS minus_second;
