-- modes: batch streaming
-- description: SIGN, TRUNCATE and ROUND keep the argument's type (DECIMAL scale as Flink derives it), BIN and HEX of negative numbers are 64-bit two's complement, HEX of text is its UTF-8 bytes.
CREATE VIEW nums AS
SELECT * FROM (VALUES
  (1, 1.2345, -7, 2.5E0, 'abc'),
  (2, -1.5678, 0, -0.5E0, ''),
  (3, CAST(NULL AS DECIMAL(5, 4)), CAST(NULL AS INT), CAST(NULL AS DOUBLE), CAST(NULL AS STRING)),
  (4, 99.9999, 123456, 1234.5678E0, 'ü')
) AS t(id, d, i, f, s);

SELECT
  id,
  SIGN(d) AS sign_d,
  SIGN(i) AS sign_i,
  SIGN(f) AS sign_f,
  TRUNCATE(d, 2) AS trunc_d,
  TRUNCATE(d) AS trunc_d0,
  TRUNCATE(i, -1) AS trunc_i,
  TRUNCATE(f, 1) AS trunc_f,
  ROUND(d, 2) AS round_d,
  ROUND(d) AS round_d0
FROM nums;

SELECT id, BIN(i) AS bin_i, HEX(i) AS hex_i, HEX(s) AS hex_s, ABS(d) AS abs_d, MOD(i, 4) AS mod_i, TYPEOF(id) AS type_id
FROM nums;
