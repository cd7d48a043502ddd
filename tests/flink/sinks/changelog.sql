-- Rows written in the changelog formats Flink writes (debezium-json, canal-json); Flink's
-- files are in ../expected/sinks.out (tests/flink/sinks.py), Weir's must be the same lines.
CREATE TABLE s_debezium (id INT, s STRING, d DECIMAL(10, 2), ts TIMESTAMP(3), n INT)
WITH ('connector' = 'filesystem', 'path' = '${OUT}/debezium', 'format' = 'debezium-json');
CREATE TABLE s_canal (id INT, s STRING, d DECIMAL(10, 2), ts TIMESTAMP(3), n INT)
WITH ('connector' = 'filesystem', 'path' = '${OUT}/canal', 'format' = 'canal-json');
INSERT INTO s_debezium VALUES
  (1, 'a', CAST(1.50 AS DECIMAL(10, 2)), TIMESTAMP '2024-01-01 10:00:00.120', CAST(NULL AS INT)),
  (2, 'b"c', CAST(-0.5 AS DECIMAL(10, 2)), TIMESTAMP '2024-01-01 10:00:00', 7);
INSERT INTO s_canal VALUES
  (1, 'a', CAST(1.50 AS DECIMAL(10, 2)), TIMESTAMP '2024-01-01 10:00:00.120', CAST(NULL AS INT)),
  (2, 'b"c', CAST(-0.5 AS DECIMAL(10, 2)), TIMESTAMP '2024-01-01 10:00:00', 7);
