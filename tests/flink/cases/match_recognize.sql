-- modes: batch streaming
-- description: MATCH_RECOGNIZE on a rowtime: V shapes with LAST(B.x, 1), greedy and reluctant loops, optional variables, {n}/{n,m} quantifiers, every AFTER MATCH SKIP strategy and the default, FIRST/LAST/aggregates/MATCH_ROWTIME in MEASURES, another variable's columns and LAST(B.x, 1) in DEFINE, WITHIN, no PARTITION BY; PREV with a physical offset and a greedy quantifier at the end are refused (Flink's own errors).
CREATE TABLE ticks (
  sym STRING,
  id INT,
  price INT,
  qty INT,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/mr_ticks.csv',
  'format' = 'csv'
);

SELECT * FROM ticks MATCH_RECOGNIZE (
  PARTITION BY sym ORDER BY ts
  MEASURES FIRST(A.id) AS start_id, LAST(B.id) AS bottom_id, C.id AS end_id,
    MATCH_ROWTIME() AS mt, AVG(B.price) AS avg_b, COUNT(B.id) AS nb, SUM(price) AS total
  ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
  PATTERN (A B+ C)
  DEFINE B AS B.price < LAST(B.price, 1) OR (LAST(B.price, 1) IS NULL AND B.price < A.price),
    C AS C.price > LAST(B.price)
) AS T;

SELECT * FROM ticks MATCH_RECOGNIZE (
  PARTITION BY sym ORDER BY ts
  MEASURES A.id AS a_id, B.id AS b_id
  PATTERN (A B)
  DEFINE A AS A.qty > 5, B AS B.price > A.price
);

SELECT * FROM ticks MATCH_RECOGNIZE (
  PARTITION BY sym ORDER BY ts
  MEASURES FIRST(A.id) AS a_id, LAST(B.id) AS last_b, C.id AS c_id, COUNT(*) AS n
  ONE ROW PER MATCH AFTER MATCH SKIP TO NEXT ROW
  PATTERN (A B+? C)
  DEFINE A AS A.qty < 5, B AS B.qty >= 3, C AS C.price > A.price
);

SELECT * FROM ticks MATCH_RECOGNIZE (
  PARTITION BY sym ORDER BY ts
  MEASURES A.id AS a_id, FIRST(B.id) AS first_b, LAST(B.id) AS last_b, C.id AS c_id
  ONE ROW PER MATCH AFTER MATCH SKIP TO LAST B
  PATTERN (A B{2,3} C)
  DEFINE A AS A.price > 20, B AS B.price > 15, C AS C.qty > 4
);

SELECT * FROM ticks MATCH_RECOGNIZE (
  PARTITION BY sym ORDER BY ts
  MEASURES A.id AS a_id, FIRST(B.id) AS first_b, LAST(B.id) AS last_b, C.id AS c_id
  ONE ROW PER MATCH AFTER MATCH SKIP TO LAST B
  PATTERN (A B{2,3}? C)
  DEFINE A AS A.price > 20, B AS B.price > 15, C AS C.qty > 4
);

SELECT * FROM ticks MATCH_RECOGNIZE (
  PARTITION BY sym ORDER BY ts
  MEASURES A.id AS a_id, B.id AS b_id, C.id AS c_id
  ONE ROW PER MATCH AFTER MATCH SKIP TO FIRST C
  PATTERN (A B? C)
  DEFINE A AS A.qty > 6, B AS B.qty < 4, C AS C.price < A.price
);

SELECT * FROM ticks MATCH_RECOGNIZE (
  PARTITION BY sym ORDER BY ts
  MEASURES FIRST(A.id) AS a_id, LAST(A.id) AS last_a, B.id AS b_id, SUM(A.qty) AS q
  ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
  PATTERN (A{2} B) WITHIN INTERVAL '5' SECOND
  DEFINE A AS A.qty > 2, B AS B.price > LAST(A.price, 1)
);

SELECT * FROM ticks MATCH_RECOGNIZE (
  ORDER BY ts
  MEASURES A.id AS a_id, B.id AS b_id, B.sym AS b_sym
  ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
  PATTERN (A B)
  DEFINE A AS A.price > 30, B AS B.price < 25
);

SELECT * FROM ticks MATCH_RECOGNIZE (
  PARTITION BY sym ORDER BY ts
  MEASURES A.id AS a_id, B.id AS b_id
  PATTERN (A B)
  DEFINE B AS B.price > PREV(B.price)
);

SELECT * FROM ticks MATCH_RECOGNIZE (
  PARTITION BY sym ORDER BY ts
  MEASURES FIRST(A.id) AS a_id, LAST(A.id) AS last_a
  ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
  PATTERN (A B+)
  DEFINE A AS A.price > 30
);
