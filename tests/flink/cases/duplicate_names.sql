-- modes: batch streaming
-- description: a SELECT list may name a column twice: Flink keeps every column and makes the names unique (id, id0, id1), also for a column of each side of a join and for an expression written twice.
CREATE VIEW people AS
SELECT * FROM (VALUES
  (1, CAST('ann' AS STRING), 10),
  (2, 'bob', 20),
  (3, 'cy', 30)
) AS t(id, name, dept);

CREATE VIEW depts AS
SELECT * FROM (VALUES
  (10, CAST('sales' AS STRING)),
  (20, 'ops')
) AS t(id, name);

SELECT id, id, name, id FROM people;

SELECT people.id, id, name AS id_name FROM people;

SELECT p.name, d.name, p.id, d.id FROM people AS p JOIN depts AS d ON p.dept = d.id;

SELECT id + 1, id + 1, id * 2 AS twice FROM people;

SELECT id AS k, name AS k FROM people;

SELECT k0, k FROM (SELECT id AS k, id + 1 AS k FROM people);
