-- Event-time TUMBLE window aggregate: keyed state, watermarks, FILTER, restore at p=3.
CREATE TABLE clicks (
  seq BIGINT,
  user_id INT,
  amount INT,
  ts AS TO_TIMESTAMP_LTZ(1717200000000 + seq * 37, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1500',
  'fields.seq.kind' = 'sequence', 'fields.seq.start' = '0', 'fields.seq.end' = '3999',
  'fields.user_id.min' = '1', 'fields.user_id.max' = '7',
  'fields.amount.min' = '1', 'fields.amount.max' = '100'
);

CREATE TABLE per_user (
  user_id INT,
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  clicks BIGINT,
  big_clicks BIGINT,
  total BIGINT,
  smallest INT,
  average DOUBLE
) WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');

INSERT INTO per_user
SELECT user_id, window_start, window_end,
       COUNT(*), COUNT(*) FILTER (WHERE amount > 50), SUM(amount), MIN(amount), ROUND(AVG(CAST(amount AS DOUBLE)), 3)
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY user_id, window_start, window_end;
