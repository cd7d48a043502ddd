-- HOP and CUMULATE window TVFs (a row joins every window it falls in), written together.
CREATE TABLE clicks (
  seq BIGINT,
  user_id INT,
  amount INT,
  ts AS TO_TIMESTAMP_LTZ(1717200000000 + seq * 53, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1500',
  'fields.seq.kind' = 'sequence', 'fields.seq.start' = '0', 'fields.seq.end' = '2999',
  'fields.user_id.min' = '1', 'fields.user_id.max' = '4',
  'fields.amount.min' = '1', 'fields.amount.max' = '100'
);

CREATE TABLE windows (
  kind STRING,
  user_id INT,
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  clicks BIGINT,
  total BIGINT
) WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');

INSERT INTO windows
SELECT 'hop', user_id, window_start, window_end, COUNT(*), SUM(amount)
FROM TABLE(HOP(TABLE clicks, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '15' SECOND))
GROUP BY user_id, window_start, window_end;

INSERT INTO windows
SELECT 'cumulate', user_id, window_start, window_end, COUNT(*), MAX(amount)
FROM TABLE(CUMULATE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '10' SECOND, INTERVAL '30' SECOND))
GROUP BY user_id, window_start, window_end;

-- Legacy HOP group window: the same rows as the HOP TVF above.
INSERT INTO windows
SELECT 'legacy-hop', user_id, HOP_START(ts, INTERVAL '5' SECOND, INTERVAL '15' SECOND),
       HOP_END(ts, INTERVAL '5' SECOND, INTERVAL '15' SECOND), COUNT(*), SUM(amount)
FROM clicks
GROUP BY HOP(ts, INTERVAL '5' SECOND, INTERVAL '15' SECOND), user_id;
