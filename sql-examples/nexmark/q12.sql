-- Nexmark q12: bids per bidder in processing-time windows.
CREATE TABLE nexmark_q12 (
  bidder  BIGINT,
  bid_count  BIGINT,
  starttime  TIMESTAMP(3),
  endtime  TIMESTAMP(3)
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_q12
SELECT
    B.bidder,
    count(*) as bid_count,
    window_start AS starttime,
    window_end AS endtime
FROM TABLE(
        TUMBLE(TABLE (SELECT *, PROCTIME() as p_time FROM bid), DESCRIPTOR(p_time), INTERVAL '10' SECOND)) B
GROUP BY B.bidder, window_start, window_end;
