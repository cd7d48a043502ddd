-- modes: batch streaming
-- description: LISTAGG with the default and a given separator; NULL values are skipped and a group of only NULLs gives NULL. Rows of one key arrive in order, so the concatenation order is deterministic.
CREATE VIEW items AS
SELECT * FROM (VALUES
  (1, 'a'),
  (1, 'b'),
  (2, 'c'),
  (2, CAST(NULL AS STRING)),
  (3, CAST(NULL AS STRING)),
  (1, 'c')
) AS t(k, v);

SELECT k, LISTAGG(v) AS l, LISTAGG(v, ';') AS l2, COUNT(v) AS n FROM items GROUP BY k;

SELECT LISTAGG(v, '') AS all_v FROM items;
