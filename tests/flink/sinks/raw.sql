-- The raw format writes each value on its own line.
CREATE TABLE r (line STRING)
WITH ('connector' = 'filesystem', 'path' = '${OUT}/raw', 'format' = 'raw');
INSERT INTO r VALUES ('a, "b"'), (''), ('{"x": 1}');
