-- modes: batch streaming
-- description: CONVERT_TZ between named zones and offsets (a STRING), LOCALTIMESTAMP and CURRENT_TIMESTAMP types.
CREATE VIEW ts AS
SELECT * FROM (VALUES
  (1, '2024-01-01 00:00:00'),
  (2, '2024-07-01 12:30:00'),
  (3, CAST(NULL AS STRING))
) AS t(id, s);

SELECT
  id,
  CONVERT_TZ(s, 'UTC', 'Asia/Shanghai') AS shanghai,
  CONVERT_TZ(s, 'Europe/Berlin', 'UTC') AS from_berlin,
  CONVERT_TZ(s, 'UTC', 'GMT-08:00') AS to_offset
FROM ts;

SELECT LOCALTIMESTAMP IS NOT NULL AS lt, CURRENT_TIMESTAMP IS NOT NULL AS ct, CURRENT_DATE IS NOT NULL AS cd;
