-- modes: batch streaming
-- description: equi-joins whose keys are expressions (computed per side before matching): inner on MOD and UPPER, a left join on an expression that is NULL for some rows, a semi join (IN) and an anti join (NOT EXISTS) on computed keys.
CREATE TABLE emp (
  id INT,
  name STRING,
  dept STRING,
  salary INT
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/emp.csv',
  'format' = 'csv'
);

CREATE TABLE dept (
  code STRING,
  title STRING,
  lvl INT
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/dept.csv',
  'format' = 'csv'
);

SELECT e.id, e.name, d.code, d.lvl
FROM emp e
JOIN dept d ON MOD(e.id, 3) + 1 = d.lvl;

SELECT e.id, d.title
FROM emp e
JOIN dept d ON UPPER(e.dept) = UPPER(d.code) AND e.salary / 1000 > d.lvl * 10;

SELECT e.id, e.name, d.title
FROM emp e
LEFT JOIN dept d ON NULLIF(e.dept, '-') = d.code AND MOD(e.id, 2) = MOD(d.lvl, 2);

SELECT e.id, e.name
FROM emp e
WHERE MOD(e.id, 4) IN (SELECT d.lvl FROM dept d);

SELECT d.code, d.lvl
FROM dept d
WHERE NOT EXISTS (SELECT 1 FROM emp e WHERE MOD(e.id, 5) = d.lvl * 2);
