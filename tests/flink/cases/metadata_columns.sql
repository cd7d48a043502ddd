-- modes: batch streaming
-- description: METADATA columns of the filesystem source (file.name, file.size, file.modification-time; declared VIRTUAL, with and without FROM), beside the file's own columns.
CREATE TABLE people (
  id INT,
  name STRING,
  fname STRING METADATA FROM 'file.name' VIRTUAL,
  age INT,
  `file.size` BIGINT METADATA VIRTUAL,
  mtime TIMESTAMP_LTZ(3) METADATA FROM 'file.modification-time' VIRTUAL,
  city STRING
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/people.csv',
  'format' = 'csv'
);

SELECT id, name, fname, age, `file.size` AS size, mtime IS NOT NULL AS has_mtime, city FROM people WHERE id < 4;

SELECT fname, COUNT(*) AS n FROM people GROUP BY fname;
