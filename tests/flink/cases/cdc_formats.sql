-- modes: batch streaming
-- description: debezium-json, canal-json (several rows per message, a DDL message, an update's old fields) and maxwell-json read as changelogs: the applied changelog, and an aggregate over it. Batch mode refuses a changelog source, as Flink does.
CREATE TABLE deb (
  id INT,
  name STRING,
  price DECIMAL(10, 2)
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/debezium.json',
  'format' = 'debezium-json'
);

CREATE TABLE can (
  id INT,
  name STRING,
  price DECIMAL(10, 2)
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/canal.json',
  'format' = 'canal-json'
);

CREATE TABLE mxw (
  id INT,
  name STRING,
  price DECIMAL(10, 2)
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/maxwell.json',
  'format' = 'maxwell-json'
);

SELECT id, name, price FROM deb;

SELECT COUNT(*) AS n, SUM(price) AS total FROM deb;

SELECT id, name, price FROM can;

SELECT id, name, price FROM mxw WHERE price > 1;
