-- Views and UNION ALL of two sources with different parallelism.
CREATE TABLE a (id BIGINT, v DOUBLE) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '1500',
  'fields.v.min' = '0', 'fields.v.max' = '10'
);
CREATE TABLE b (id BIGINT, v DOUBLE) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000', 'scan.parallelism' = '1',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '100001', 'fields.id.end' = '101200',
  'fields.v.min' = '-5', 'fields.v.max' = '5'
);
CREATE VIEW a_big AS SELECT id, ROUND(v, 3) AS v, 'a' AS src FROM a WHERE v > 2.5;
CREATE VIEW b_all AS SELECT id, ROUND(ABS(v), 3) AS v, 'b' AS src FROM b;

CREATE TABLE merged (id BIGINT, v DOUBLE, src STRING)
WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');

INSERT INTO merged
SELECT * FROM a_big
UNION ALL
SELECT * FROM b_all;
