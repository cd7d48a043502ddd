-- MATCH_RECOGNIZE: per key, V shapes (a greedy loop of falling prices between two rows)
-- and, within two seconds, a row above 30 followed by the fewest rows at or below 30 and
-- a row above the first (reluctant, every start row). Rows arrive out of order within the
-- watermark's delay and wait for it; partial matches (and the rows they hold) are
-- checkpointed state.
CREATE TABLE ticks (
  seq BIGINT,
  k AS CAST(MOD(seq, 7) AS INT),
  price AS CAST(MOD(seq * 7919, 53) AS INT),
  ts AS TO_TIMESTAMP_LTZ(1717200000000 + seq * 40 - MOD(seq, 5) * 50, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1500',
  'fields.seq.kind' = 'sequence', 'fields.seq.start' = '0', 'fields.seq.end' = '5999'
);

CREATE TABLE vshapes (k INT, first_seq BIGINT, bottom_seq BIGINT, last_seq BIGINT, falls BIGINT, low INT)
WITH ('connector' = 'filesystem', 'path' = '${out}/vshapes', 'format' = 'json');

CREATE TABLE rebounds (k INT, a_seq BIGINT, last_b BIGINT, c_seq BIGINT, n BIGINT)
WITH ('connector' = 'filesystem', 'path' = '${out}/rebounds', 'format' = 'json');

INSERT INTO vshapes
SELECT * FROM ticks MATCH_RECOGNIZE (
  PARTITION BY k ORDER BY ts
  MEASURES FIRST(A.seq) AS first_seq, LAST(B.seq) AS bottom_seq, C.seq AS last_seq,
    COUNT(B.seq) AS falls, MIN(B.price) AS low
  ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
  PATTERN (A B+ C)
  DEFINE B AS B.price < LAST(B.price, 1) OR (LAST(B.price, 1) IS NULL AND B.price < A.price),
    C AS C.price > LAST(B.price)
);

INSERT INTO rebounds
SELECT * FROM ticks MATCH_RECOGNIZE (
  PARTITION BY k ORDER BY ts
  MEASURES A.seq AS a_seq, LAST(B.seq) AS last_b, C.seq AS c_seq, COUNT(*) AS n
  ONE ROW PER MATCH AFTER MATCH SKIP TO NEXT ROW
  PATTERN (A B+? C) WITHIN INTERVAL '2' SECOND
  DEFINE A AS A.price > 30, B AS B.price <= 30, C AS C.price > A.price
);
