-- modes: batch streaming
-- description: uncorrelated scalar subqueries as values (streaming: a join with the subquery's single-row updating result): in WHERE against an average, in the select list, over an empty input (NULL), a COUNT(*) beside another table's rows; and a join without an equality condition.
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

SELECT id, name FROM emp WHERE salary > (SELECT AVG(salary) FROM emp);

SELECT id, salary - (SELECT MIN(salary) FROM emp) AS above_min FROM emp;

SELECT id FROM emp WHERE salary > (SELECT MAX(salary) FROM emp WHERE dept = 'none');

SELECT code, (SELECT COUNT(*) FROM emp) AS employees FROM dept;

SELECT e.id, d.code FROM emp e, dept d WHERE e.salary > d.lvl * 40000;

SELECT dept, SUM(salary * 100 / (SELECT MAX(salary) FROM emp)) AS pct FROM emp GROUP BY dept;
