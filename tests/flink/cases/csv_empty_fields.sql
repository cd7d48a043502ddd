-- modes: batch streaming
-- description: an empty csv field is an empty STRING (not NULL); an empty field for an INT column fails the job.
CREATE TABLE labels (
  id INT,
  a STRING,
  b STRING
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/labels_empty.csv',
  'format' = 'csv'
);

CREATE TABLE scores (
  id INT,
  name STRING,
  score INT
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/scores_empty.csv',
  'format' = 'csv'
);

SELECT id, a, a IS NULL AS a_null, CHAR_LENGTH(a) AS a_len, b, b IS NULL AS b_null FROM labels;

SELECT id, name, score FROM scores;
