-- ORDER BY in streaming mode: a temporal sort (ORDER BY the rowtime, rows out of order
-- within the watermark's bound, released as the watermark passes them) with a LIMIT after
-- it, and an updating Top-N over the whole input (ORDER BY … LIMIT n, written as a
-- debezium-json changelog). The waiting rows and the Top-N are checkpointed state.
CREATE TABLE clicks (
  seq BIGINT,
  user_id INT,
  amount INT,
  ts AS TO_TIMESTAMP_LTZ(1717200000000 + seq * 37 - MOD(seq, 5) * 50, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1500',
  'fields.seq.kind' = 'sequence', 'fields.seq.start' = '0', 'fields.seq.end' = '3999',
  'fields.user_id.min' = '1', 'fields.user_id.max' = '7',
  'fields.amount.min' = '1', 'fields.amount.max' = '100000'
);

CREATE TABLE sorted (seq BIGINT, user_id INT, ts TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = '${out}/sorted', 'format' = 'json');

CREATE TABLE best (seq BIGINT, amount INT)
WITH ('connector' = 'filesystem', 'path' = '${out}/best', 'format' = 'debezium-json');

INSERT INTO sorted
SELECT seq, user_id, ts FROM clicks WHERE user_id <> 3 ORDER BY ts, seq LIMIT 3000;

INSERT INTO best
SELECT seq, amount FROM clicks ORDER BY amount DESC, seq LIMIT 5;
