-- Computed columns and a watermark; the computed rowtime feeds the output.
CREATE TABLE clicks (
  seq BIGINT,
  user_id INT,
  url STRING,
  click_time AS TO_TIMESTAMP_LTZ(1717200000000 + seq * 1000, 3),
  url_len AS CHARACTER_LENGTH(url),
  WATERMARK FOR click_time AS click_time - INTERVAL '5' SECOND
) WITH (
  'connector' = 'datagen',
  'rows-per-second' = '1500',
  'fields.seq.kind' = 'sequence',
  'fields.seq.start' = '0',
  'fields.seq.end' = '2499',
  'fields.user_id.min' = '1',
  'fields.user_id.max' = '9',
  'fields.url.length' = '12'
);

CREATE TABLE out_clicks (
  seq BIGINT,
  user_id INT,
  click_time TIMESTAMP(3),
  url_len INT,
  domain STRING
) WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');

INSERT INTO out_clicks
SELECT seq, user_id, click_time, url_len, CONCAT('site-', LEFT(url, 2), '.example')
FROM clicks
WHERE user_id <> 3;
