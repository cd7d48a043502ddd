-- modes: batch streaming
-- description: inner equi-join of two csv tables: duplicate keys multiply, NULL keys never match, empty-string keys do, matching is case-sensitive.
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
JOIN dept d ON e.dept = d.code;

SELECT d.code, COUNT(*) AS n, SUM(e.salary) AS salaries
FROM emp_v e
JOIN dept d ON e.dept = d.code AND e.salary > 0
GROUP BY d.code;
