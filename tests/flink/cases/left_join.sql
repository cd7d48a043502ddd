-- modes: batch streaming
-- description: left outer join of two csv tables (streaming: updating, NULL-padded rows are retracted when a match arrives); an anti-join via IS NULL.
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

-- '-' in emp.csv stands for a NULL department.
CREATE VIEW emp_v AS
SELECT id, name, NULLIF(dept, '-') AS dept, salary FROM emp;

SELECT e.id, e.name, e.dept, d.title, d.lvl
FROM emp_v e
LEFT JOIN dept d ON e.dept = d.code;

SELECT e.id, e.name
FROM emp_v e
LEFT JOIN dept d ON e.dept = d.code
WHERE d.code IS NULL;

SELECT d.code, d.title, COUNT(e.id) AS n
FROM dept d
LEFT JOIN emp_v e ON e.dept = d.code
GROUP BY d.code, d.title;
