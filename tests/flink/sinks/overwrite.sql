-- INSERT OVERWRITE in batch mode: a whole table, a static partition, and the partitions a
-- query writes into (dynamic overwrite); INSERT INTO with a static partition.
CREATE TABLE t (id INT, dt STRING) PARTITIONED BY (dt)
WITH ('connector' = 'filesystem', 'path' = '${OUT}/t', 'format' = 'csv');
CREATE TABLE u (id INT, s STRING)
WITH ('connector' = 'filesystem', 'path' = '${OUT}/u', 'format' = 'csv');
INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'b'), (4, 'c');
INSERT INTO u VALUES (1, 'x'), (2, 'y');
INSERT OVERWRITE t PARTITION (dt = 'b') SELECT 20;
INSERT INTO t PARTITION (dt = 'd') VALUES (30), (31);
INSERT OVERWRITE u SELECT 9, 'z';
INSERT OVERWRITE t SELECT 40, 'c';
