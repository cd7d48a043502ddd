-- PARTITIONED BY writes Hive-style folders; the files hold the other columns.
CREATE TABLE events (id BIGINT, kind INT, region STRING) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1500',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '2000',
  'fields.kind.min' = '0', 'fields.kind.max' = '3',
  'fields.region.length' = '1', 'fields.region.null-rate' = '0.05'
);
CREATE TABLE by_kind (id BIGINT, region STRING, kind INT)
PARTITIONED BY (kind, region)
WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');
INSERT INTO by_kind SELECT id, CASE WHEN region < 'n' THEN 'west' WHEN region IS NULL THEN NULL ELSE 'east/x' END, kind FROM events;
