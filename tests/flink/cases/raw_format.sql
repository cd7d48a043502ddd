-- modes: batch streaming
-- description: the raw format reads each line of a file as one STRING value (an empty line is an empty string).
CREATE TABLE lines (
  line STRING
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/lines.txt',
  'format' = 'raw'
);

SELECT line, CHAR_LENGTH(line) AS n FROM lines;
