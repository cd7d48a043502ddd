-- modes: batch streaming
-- description: Flink's csv format has no header line: the first line of the file is a data row. Quoted fields keep commas and doubled quotes.
CREATE TABLE people (
  id INT,
  name STRING,
  age INT,
  city STRING
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/people.csv',
  'format' = 'csv'
);

SELECT * FROM people;

SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS ids, SUM(age) AS ages FROM people WHERE age >= 0;

SELECT id, name, city FROM people WHERE id = 1;

SELECT id, TYPEOF(id) AS t_id, TYPEOF(name) AS t_name, TYPEOF(id + 1) AS t_sum FROM people WHERE age = 27;
