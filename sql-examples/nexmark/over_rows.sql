-- Not part of the Nexmark suite: each bid with the average and highest price of its
-- auction's last ten bids, an OVER ROWS aggregate per auction (issue 18's benchmark).
CREATE TABLE nexmark_over_rows (
  auction  BIGINT,
  price  BIGINT,
  avg_price  BIGINT,
  max_price  BIGINT
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_over_rows
SELECT auction, price, AVG(price) OVER w, MAX(price) OVER w
FROM bid
WINDOW w AS (PARTITION BY auction ORDER BY `dateTime` ROWS BETWEEN 9 PRECEDING AND CURRENT ROW);
