-- modes: batch streaming
-- description: catalogs and databases: three-part and two-part names, USE, a view resolved in the database it was created in, ALTER TABLE (options, a computed column, rename) seen by later queries and by views.
CREATE CATALOG cat WITH ('type' = 'generic_in_memory');
CREATE DATABASE cat.hr;

CREATE TABLE cat.hr.emp (
  id INT,
  name STRING,
  dept STRING,
  salary INT
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/emp.csv',
  'format' = 'csv'
);

-- A table of the same name in default_catalog.default_database, with other rows.
CREATE TABLE emp (
  code STRING,
  title STRING,
  lvl INT
) WITH (
  'connector' = 'filesystem',
  'path' = '${DATA}/dept.csv',
  'format' = 'csv'
);

SELECT id, name FROM cat.hr.emp WHERE salary > 60000;

USE cat.hr;

-- `emp` is cat.hr.emp here.
CREATE VIEW rich AS SELECT id, name, salary FROM emp WHERE salary >= 95000;

SELECT name, salary FROM rich;

USE CATALOG default_catalog;

-- `emp` is default_catalog.default_database.emp again; the view still reads cat.hr.emp.
SELECT code, lvl FROM emp;

SELECT r.name, e.title FROM cat.hr.rich r JOIN emp e ON r.id = e.lvl;

ALTER TABLE cat.hr.emp ADD bonus AS salary / 10;

SELECT id, bonus FROM cat.hr.emp WHERE id <= 3;

ALTER TABLE cat.hr.emp RENAME TO staff;

SELECT COUNT(*) AS n FROM cat.hr.staff;
