-- modes: batch streaming
-- description: JSON_VALUE (STRING and RETURNING INT), JSON_QUERY, JSON_EXISTS, IS JSON, JSON_OBJECT, JSON_ARRAY. Query 3 pins that Flink fails the job when RETURNING INT meets a JSON string (a ClassCastException inside Flink).
CREATE VIEW docs AS
SELECT * FROM (VALUES
  (1, '{"a": 1, "b": {"c": "x"}, "arr": [1, 2, 3]}'),
  (2, '{"a": "2"}'),
  (3, 'not json'),
  (4, '[]'),
  (5, CAST(NULL AS STRING)),
  (6, '{"a": null, "b": true}'),
  (7, '{"a": "x1", "b": 1.50}'),
  (8, '{"a": -42}')
) AS t(id, j);

SELECT
  id,
  JSON_VALUE(j, '$.a') AS a,
  JSON_VALUE(j, '$.b.c') AS bc,
  JSON_VALUE(j, '$.b') AS b,
  JSON_QUERY(j, '$.b') AS q_b,
  JSON_QUERY(j, '$.arr') AS q_arr,
  JSON_EXISTS(j, '$.a') AS has_a,
  j IS JSON AS is_json,
  j IS JSON OBJECT AS is_obj,
  j IS JSON ARRAY AS is_arr
FROM docs;

SELECT id, JSON_VALUE(j, '$.a' RETURNING INT) AS a_int, JSON_VALUE(j, '$.zz' RETURNING INT) AS missing
FROM docs
WHERE id NOT IN (2, 7);

SELECT JSON_VALUE('{"a": "2"}', '$.a' RETURNING INT) AS a_int;

SELECT
  JSON_OBJECT('k' VALUE 1, 'n' VALUE CAST(NULL AS INT)) AS obj_null,
  JSON_OBJECT('k' VALUE 'v', 'n' VALUE CAST(NULL AS INT) ABSENT ON NULL) AS obj_absent,
  JSON_OBJECT('nested' VALUE JSON_OBJECT('x' VALUE TRUE)) AS obj_nested,
  JSON_ARRAY(1, 'a', TRUE, 1.5) AS arr,
  JSON_ARRAY(1, CAST(NULL AS INT)) AS arr_null,
  JSON_ARRAY() AS arr_empty;
