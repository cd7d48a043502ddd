-- Rows written by the filesystem sink in json and csv with their options; Flink's files
-- are in ../expected/sinks.out (tests/flink/sinks.py), Weir's must be the same lines.
CREATE TABLE s_json (ts TIMESTAMP(3), ts0 TIMESTAMP(0), ts6 TIMESTAMP(6), ltz TIMESTAMP_LTZ(3), d DATE, b BOOLEAN, f DOUBLE, r FLOAT, dc DECIMAL(10, 2), s STRING, arr ARRAY<INT>, m MAP<STRING, INT>, rw ROW<x INT, y STRING>, bs BYTES, n INT)
WITH ('connector' = 'filesystem', 'path' = '${OUT}/json', 'format' = 'json');
CREATE TABLE s_json_iso (ts TIMESTAMP(3), ltz TIMESTAMP_LTZ(3), s STRING)
WITH ('connector' = 'filesystem', 'path' = '${OUT}/json_iso', 'format' = 'json', 'json.timestamp-format.standard' = 'ISO-8601');
CREATE TABLE s_csv (ts TIMESTAMP(3), ltz TIMESTAMP_LTZ(3), d DATE, b BOOLEAN, f DOUBLE, dc DECIMAL(10, 2), s STRING, arr ARRAY<INT>, bs BYTES, n INT)
WITH ('connector' = 'filesystem', 'path' = '${OUT}/csv', 'format' = 'csv');
CREATE TABLE s_csv_pipe (id INT, s STRING, arr ARRAY<STRING>, n INT)
WITH ('connector' = 'filesystem', 'path' = '${OUT}/csv_pipe', 'format' = 'csv', 'csv.field-delimiter' = '|', 'csv.quote-character' = '''', 'csv.null-literal' = 'N/A', 'csv.array-element-delimiter' = '+');
INSERT INTO s_json VALUES
  (TIMESTAMP '2024-01-01 10:00:00.120', TIMESTAMP '2024-01-01 10:00:00', TIMESTAMP '2024-01-01 10:00:00.123456', TO_TIMESTAMP_LTZ(1704103200120, 3), DATE '2024-01-02', TRUE, 1.0E20, CAST(0.1 AS FLOAT), CAST(1.50 AS DECIMAL(10, 2)), 'a,"b\', ARRAY[1, 2], MAP['k', 1], ROW(1, 'z'), X'0102', CAST(NULL AS INT)),
  (TIMESTAMP '2024-01-01 10:00:00', TIMESTAMP '2024-01-01 10:00:01', TIMESTAMP '2024-01-01 10:00:00.000001', TO_TIMESTAMP_LTZ(0, 3), DATE '1999-12-31', FALSE, 0.1E0, CAST(1.5 AS FLOAT), CAST(100.00 AS DECIMAL(10, 2)), 'tab	here', ARRAY[3], MAP['a', 2], ROW(2, 'y'), X'', 7);
INSERT INTO s_json_iso VALUES (TIMESTAMP '2024-01-01 10:00:00.120', TO_TIMESTAMP_LTZ(1704103200120, 3), 'x');
INSERT INTO s_csv VALUES
  (TIMESTAMP '2024-01-01 10:00:00.120', TO_TIMESTAMP_LTZ(1704103200120, 3), DATE '2024-01-02', TRUE, 1.0E20, CAST(1.50 AS DECIMAL(10, 2)), 'a,"b', ARRAY[1, 2], X'0102', CAST(NULL AS INT)),
  (TIMESTAMP '2024-01-01 10:00:00', TO_TIMESTAMP_LTZ(0, 3), DATE '1999-12-31', FALSE, 1.0E-5, CAST(0.00 AS DECIMAL(10, 2)), 'x y', ARRAY[3], X'', 7),
  (TIMESTAMP '2024-01-01 10:00:00', TO_TIMESTAMP_LTZ(0, 3), DATE '1999-12-31', FALSE, 100.0E0, CAST(-0.5 AS DECIMAL(10, 2)), '', CAST(NULL AS ARRAY<INT>), X'ff', 8),
  (TIMESTAMP '2024-01-01 10:00:00', TO_TIMESTAMP_LTZ(0, 3), DATE '1999-12-31', FALSE, 100.0E0, CAST(-0.5 AS DECIMAL(10, 2)), 'semi;colon#hash', ARRAY[4], X'ff', 9);
INSERT INTO s_csv_pipe VALUES (1, 'a|b', ARRAY['x', 'y'], CAST(NULL AS INT)), (2, 'it''s', ARRAY['z'], 3), (3, 'plain', CAST(NULL AS ARRAY<STRING>), 4);
