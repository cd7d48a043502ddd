-- modes: batch streaming
-- description: REGEXP_REPLACE replaces every match (Java regex; the replacement is literal text, $n is not a group reference); REGEXP_EXTRACT group index; REGEXP matches anywhere in the string (find, not a full match); SPLIT_INDEX (NULL when out of range).
CREATE VIEW strs AS
SELECT * FROM (VALUES
  (1, 'a1b22c333'),
  (2, 'no digits'),
  (3, ''),
  (4, 'x|y|z'),
  (5, CAST(NULL AS STRING)),
  (6, 'foo.bar@example.com'),
  (7, 'AB12')
) AS t(id, s);

SELECT
  id,
  REGEXP_REPLACE(s, '[0-9]+', '#') AS r_digits,
  REGEXP_REPLACE(s, '([a-z])([0-9])', '$2$1') AS r_swap,
  REGEXP_REPLACE(s, '\.', '-') AS r_dot,
  REGEXP_REPLACE(s, '', '_') AS r_empty
FROM strs;

SELECT
  id,
  REGEXP_EXTRACT(s, '([a-z]+)([0-9]+)', 2) AS e2,
  REGEXP_EXTRACT(s, '([a-z]+)([0-9]+)', 0) AS e0,
  REGEXP_EXTRACT(s, '[0-9]+') AS e_default,
  REGEXP(s, '[0-9]') AS has_digit,
  REGEXP(s, '^[a-z0-9]+$') AS all_alnum
FROM strs;

SELECT
  id,
  SPLIT_INDEX(s, '|', 1) AS pipe1,
  SPLIT_INDEX(s, '.', 0) AS dot0,
  SPLIT_INDEX(s, 'b', 5) AS out_of_range,
  SPLIT_INDEX('a,b,,c', ',', 2) AS empty_part
FROM strs;
