-- Nexmark q11: bids per bidder in each session of activity.
CREATE TABLE nexmark_q11 (
  bidder  BIGINT,
  bid_count  BIGINT,
  starttime  TIMESTAMP(3),
  endtime  TIMESTAMP(3)
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_q11
SELECT
    B.bidder,
    count(*) as bid_count,
    SESSION_START(B.`dateTime`, INTERVAL '10' SECOND) as starttime,
    SESSION_END(B.`dateTime`, INTERVAL '10' SECOND) as endtime
FROM bid B
GROUP BY B.bidder, SESSION(B.`dateTime`, INTERVAL '10' SECOND);
