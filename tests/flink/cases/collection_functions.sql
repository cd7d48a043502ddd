-- modes: batch streaming
-- description: ARRAY and MAP constructors, element access, CARDINALITY of arrays and maps, ELEMENT, STR_TO_MAP, SPLIT, ENCODE/DECODE with Java charset names. Query 3 pins that ELEMENT of a longer array fails the job.
CREATE VIEW texts AS
SELECT * FROM (VALUES
  (1, 'a=1,b=2', 'x,y,,z'),
  (2, 'k=v', ''),
  (3, CAST(NULL AS STRING), CAST(NULL AS STRING)),
  (4, 'solo', 'one')
) AS t(id, kv, csv);

SELECT
  id,
  STR_TO_MAP(kv) AS m,
  STR_TO_MAP(kv)['b'] AS m_b,
  CARDINALITY(STR_TO_MAP(kv)) AS m_n,
  SPLIT(csv, ',') AS parts,
  CARDINALITY(SPLIT(csv, ',')) AS parts_n
FROM texts;

SELECT
  CARDINALITY(ARRAY[1, 2, 3]) AS card_arr,
  CARDINALITY(MAP['a', 1, 'b', 2]) AS card_map,
  MAP['a', 1, 'b', 2]['b'] AS map_get,
  ARRAY[10, 20, 30][2] AS arr_get,
  ELEMENT(ARRAY[7]) AS elem,
  STR_TO_MAP('a:1;b:2', ';', ':') AS s2m,
  ENCODE('häx', 'UTF-8') AS enc,
  DECODE(ENCODE('häx', 'UTF-8'), 'UTF-8') AS decoded,
  DECODE(ENCODE('häx', 'ISO-8859-1'), 'ISO-8859-1') AS dec_latin;

SELECT ELEMENT(ARRAY[1, 2]) AS elem;
