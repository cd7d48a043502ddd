-- modes: batch streaming
-- description: UNNEST in FROM: CROSS JOIN UNNEST of an array computed per row, LEFT JOIN UNNEST ON TRUE keeping rows whose array is empty or NULL, WITH ORDINALITY, a map's entries, an array of rows expanded into columns, an aggregate over the unnested elements (updating in streaming), and UNNEST over a file table filtered on the element.
CREATE TABLE emp (
  id INT,
  name STRING,
  dept STRING,
  salary INT
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/emp.csv',
  'format' = 'csv'
);

CREATE VIEW tagged AS
SELECT * FROM (VALUES
  (1, 'a,b,c'),
  (2, 'b'),
  (3, CAST(NULL AS STRING)),
  (4, 'x,b')
) AS t(id, csv);

SELECT t.id, u.tag
FROM tagged t CROSS JOIN UNNEST(SPLIT(t.csv, ',')) AS u(tag);

SELECT t.id, u.tag
FROM tagged t LEFT JOIN UNNEST(SPLIT(t.csv, ',')) AS u(tag) ON TRUE;

SELECT id, tag, pos
FROM tagged CROSS JOIN UNNEST(SPLIT(csv, ',')) WITH ORDINALITY AS u(tag, pos);

SELECT tag, COUNT(*) AS n
FROM tagged CROSS JOIN UNNEST(SPLIT(csv, ',')) AS u(tag)
GROUP BY tag;

SELECT m.id, e.k, e.v
FROM (VALUES (1, MAP['a', 1, 'b', 2]), (2, MAP['c', 3])) AS m(id, mm)
CROSS JOIN UNNEST(m.mm) AS e(k, v);

SELECT o.id, i.product, i.qty
FROM (VALUES (1, ARRAY[ROW('apple', 3), ROW('pear', 1)]), (2, ARRAY[ROW('fig', 7)])) AS o(id, items)
CROSS JOIN UNNEST(o.items) AS i(product, qty);

SELECT e.id, e.name, x
FROM emp e CROSS JOIN UNNEST(ARRAY[e.salary, e.salary * 2]) AS u(x)
WHERE x > 90000;
