-- modes: batch streaming
-- description: scalar function results: conditionals, number/text encodings, hashes, padding and case, substring family, trimming.
CREATE VIEW strs AS
SELECT * FROM (VALUES
  (1, 'Hello World'),
  (2, CAST(NULL AS STRING)),
  (3, ''),
  (4, '  padded  '),
  (5, 'a|b\c'),
  (6, 'xxhixx'),
  (7, 'ünïcödé')
) AS t(id, s);

SELECT
  IF(1 > 2, 'a', 'b') AS if_s,
  IFNULL(CAST(NULL AS STRING), 'x') AS ifnull_s,
  COALESCE(CAST(NULL AS INT), 2, 3) AS coalesce_i,
  SIGN(-3.5) AS sign_neg,
  SIGN(0) AS sign_zero,
  TRUNCATE(1.2345, 2) AS trunc,
  TRUNCATE(-1.5678, 1) AS trunc_neg,
  BIN(5) AS bin5,
  HEX(255) AS hex255,
  HEX('abc') AS hex_abc,
  LOCATE('b', 'abc') AS loc_b,
  LOCATE('z', 'abc') AS loc_z,
  TO_BASE64('abc') AS b64,
  FROM_BASE64('YWJj') AS unb64;

SELECT
  SHA1('a') AS sha1,
  SHA2('a', 256) AS sha256,
  MD5('a') AS md5,
  LPAD('hi', 5, 'xy') AS lpad,
  RPAD('hi', 5, 'xy') AS rpad,
  LPAD('hello', 3, 'x') AS lpad_cut,
  INITCAP('hello wORLD foo-bar') AS initcap,
  REPEAT('ab', 3) AS rep,
  REVERSE('abc') AS rev,
  SPLIT_INDEX('a-b-c', '-', 1) AS split1;

SELECT
  id,
  CHAR_LENGTH(s) AS len,
  SUBSTRING(s, 2, 3) AS sub,
  SUBSTRING(s FROM 2) AS sub_from,
  OVERLAY(s PLACING 'XX' FROM 2 FOR 1) AS ovl,
  CONCAT_WS('-', s, 'x', CAST(NULL AS STRING)) AS cws,
  CONCAT(s, '!') AS cat,
  TRIM(s) AS trimmed,
  LTRIM(s) AS ltrimmed,
  TRIM(BOTH 'x' FROM s) AS trim_x,
  UPPER(s) AS up,
  POSITION('l' IN s) AS pos_l
FROM strs;
