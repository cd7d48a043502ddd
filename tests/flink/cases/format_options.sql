-- modes: batch streaming
-- description: csv options (field delimiter, quote character, comments, null literal, array element delimiter), csv.ignore-parse-errors (a field that does not parse is NULL, a record of the wrong width is skipped), json.ignore-parse-errors (a field that does not decode is NULL, a line that is not JSON is skipped; a missing field is NULL).
CREATE TABLE opts (
  id INT,
  name STRING,
  n INT,
  arr ARRAY<INT>
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/options.csv',
  'format' = 'csv',
  'csv.field-delimiter' = '|',
  'csv.quote-character' = '''',
  'csv.allow-comments' = 'true',
  'csv.null-literal' = 'N/A',
  'csv.array-element-delimiter' = ';'
);

CREATE TABLE bad_fields (
  id INT,
  v INT
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/bad_fields.csv',
  'format' = 'csv',
  'csv.ignore-parse-errors' = 'true'
);

CREATE TABLE lenient (
  id INT,
  v INT,
  ts TIMESTAMP(3)
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/lenient.json',
  'format' = 'json',
  'json.ignore-parse-errors' = 'true'
);

SELECT id, name, n, arr, CARDINALITY(arr) AS arr_n FROM opts;

SELECT id, v FROM bad_fields;

SELECT id, v, ts FROM lenient;
