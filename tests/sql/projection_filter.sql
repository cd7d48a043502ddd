-- Stateless SQL: filters, CASE, CAST, DECIMAL arithmetic, string functions, nested rows.
CREATE TABLE orders (
  id BIGINT,
  customer INT,
  price DECIMAL(8, 2),
  note STRING,
  ok BOOLEAN
) WITH (
  'connector' = 'datagen',
  'rows-per-second' = '2000',
  'fields.id.kind' = 'sequence',
  'fields.id.start' = '1',
  'fields.id.end' = '3000',
  'fields.customer.min' = '1',
  'fields.customer.max' = '50',
  'fields.note.length' = '6',
  'fields.note.null-rate' = '0.1'
);

CREATE TABLE result (
  id BIGINT,
  size STRING,
  eur DECIMAL(12, 3),
  tag STRING,
  info ROW<customer INT, shout STRING>,
  customer_plus BIGINT
) WITH ('connector' = 'filesystem', 'path' = '${out}', 'format' = 'json');

INSERT INTO result
SELECT
  id,
  CASE WHEN price > 500000 THEN 'large' WHEN price > 100000 THEN 'medium' ELSE 'small' END,
  CAST(price * 0.908 AS DECIMAL(12, 3)),
  COALESCE(UPPER(SUBSTRING(note, 1, 3)), 'none') || '-' || CAST(MOD(id, 7) AS STRING),
  named_struct('customer', customer, 'shout', UPPER(note)),
  CAST(customer AS BIGINT) + 1000
FROM orders
WHERE MOD(id, 3) <> 0 AND ok;
