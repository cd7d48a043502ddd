"""Weir against Apache Flink on the same generated rows, per CPU second.

Queries (streaming, parallelism 2, into a blackhole sink; bids one millisecond apart,
`auction` random in [0, 10000), watermark `ts - 4 s`):

* `over_rows`: each bid with the average and highest price of its auction's last ten bids,
  `AVG(price), MAX(price) OVER (PARTITION BY auction ORDER BY ts ROWS BETWEEN 9 PRECEDING
  AND CURRENT ROW)`.
* `temporal_join`: each bid joined with the version of its auction valid at the bid's
  time (`JOIN auction FOR SYSTEM_TIME AS OF b.ts`), from a versioned table of 600 000
  auction versions (`PRIMARY KEY (id)`, a version every 15 ms over the same time range).
* `match_recognize`: per bidder (random in [0, 100000)), two rising bids followed by a
  lower one, `MATCH_RECOGNIZE (PARTITION BY bidder ORDER BY ts … PATTERN (UP1 UP2 DOWN)
  DEFINE UP2 AS UP2.price > UP1.price, DOWN AS DOWN.price < UP2.price)`, skip past the
  last row; the conditions read another variable's row, so each is evaluated per partial
  match.

Each runs once through `weir run` and once through PyFlink's local mini-cluster (Flink's
own datagen; Java 17). Prints, per engine, wall seconds, rows/s, CPU seconds of the
engine's processes and rows/s per CPU second (per core), and Weir's per-core ratio.

    pip install apache-flink==2.3.0
    python3 benches/flink/compare.py [QUERY[,QUERY]] [ROWS] [path/to/weir]

QUERY defaults to every query; ROWS to 9 200 000 (the bids of 10M Nexmark events); the
binary to target/release/weir under $CARGO_TARGET_DIR (`cargo build --profile bench --bin
weir`).
"""

import os
import subprocess
import sys
import tempfile
import time

QUERY_NAMES = (
    sys.argv[1].split(",")
    if len(sys.argv) > 1
    else ["over_rows", "temporal_join", "match_recognize"]
)
ROWS = int(sys.argv[2]) if len(sys.argv) > 2 else 9_200_000
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(os.path.dirname(__file__), "../../target"))
WEIR = sys.argv[3] if len(sys.argv) > 3 else os.path.join(TARGET, "release/weir")
VERSIONS = 600_000

BID = f"""
CREATE TABLE bid (
  seq BIGINT,
  auction BIGINT,
  price BIGINT,
  ts AS TO_TIMESTAMP_LTZ(1700000000000 + seq, 3),
  WATERMARK FOR ts AS ts - INTERVAL '4' SECOND
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000000000', 'number-of-rows' = '{ROWS}',
  'fields.seq.kind' = 'sequence', 'fields.seq.start' = '0', 'fields.seq.end' = '{ROWS - 1}',
  'fields.auction.min' = '0', 'fields.auction.max' = '9999',
  'fields.price.min' = '1', 'fields.price.max' = '100000'
)"""
AUCTION = f"""
CREATE TABLE auction (
  n BIGINT,
  id BIGINT,
  reserve BIGINT,
  ts AS TO_TIMESTAMP_LTZ(1700000000000 + n * {ROWS // VERSIONS}, 3),
  WATERMARK FOR ts AS ts - INTERVAL '4' SECOND,
  PRIMARY KEY (id) NOT ENFORCED
) WITH (
  'connector' = 'datagen', 'rows-per-second' = '1000000000', 'number-of-rows' = '{VERSIONS}',
  'fields.n.kind' = 'sequence', 'fields.n.start' = '0', 'fields.n.end' = '{VERSIONS - 1}',
  'fields.id.min' = '0', 'fields.id.max' = '9999',
  'fields.reserve.min' = '1', 'fields.reserve.max' = '100000'
)"""

# The bids with a bidder, for the per-bidder pattern.
BID_BY_BIDDER = BID.replace(
    "  auction BIGINT,\n", "  auction BIGINT,\n  bidder BIGINT,\n"
).replace(
    "'fields.auction.min' = '0',", "'fields.bidder.min' = '0', 'fields.bidder.max' = '99999',\n  'fields.auction.min' = '0',"
)

QUERIES = {
    "over_rows": [
        BID,
        """CREATE TABLE sink (auction BIGINT, price BIGINT, avg_price BIGINT, max_price BIGINT)
        WITH ('connector' = 'blackhole')""",
        """INSERT INTO sink
        SELECT auction, price, AVG(price) OVER w, MAX(price) OVER w FROM bid
        WINDOW w AS (PARTITION BY auction ORDER BY ts ROWS BETWEEN 9 PRECEDING AND CURRENT ROW)""",
    ],
    "temporal_join": [
        BID,
        AUCTION,
        """CREATE TABLE sink (auction BIGINT, price BIGINT, reserve BIGINT)
        WITH ('connector' = 'blackhole')""",
        """INSERT INTO sink
        SELECT b.auction, b.price, a.reserve FROM bid AS b
        JOIN auction FOR SYSTEM_TIME AS OF b.ts AS a ON b.auction = a.id""",
    ],
    "match_recognize": [
        BID_BY_BIDDER,
        """CREATE TABLE sink (bidder BIGINT, first_price BIGINT, top_price BIGINT,
          drop_price BIGINT)
        WITH ('connector' = 'blackhole')""",
        """INSERT INTO sink
        SELECT * FROM bid MATCH_RECOGNIZE (
          PARTITION BY bidder ORDER BY ts
          MEASURES UP1.price AS first_price, UP2.price AS top_price, DOWN.price AS drop_price
          ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
          PATTERN (UP1 UP2 DOWN)
          DEFINE UP2 AS UP2.price > UP1.price, DOWN AS DOWN.price < UP2.price
        )""",
    ],
}


def cpu_seconds(pid):
    """User + system CPU seconds of a process and its threads so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def descendants(pid):
    """Process ids below `pid` (from /proc, without psutil)."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                pass
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        found += kids
        frontier += kids
    return found


def report(query, engine, wall, cpu):
    per_core = f"{ROWS / cpu:.0f}" if cpu else "?"
    print(
        f"{query} engine={engine} rows={ROWS} wall_s={wall:.2f} rows_per_s={ROWS / wall:.0f} "
        f"cpu_s={cpu:.1f} rows_per_s_per_core={per_core}",
        flush=True,
    )
    return ROWS / cpu if cpu else None


def run_weir(query):
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, f"{query}.sql")
        with open(script, "w") as f:
            f.write("".join(f"{statement};\n" for statement in QUERIES[query]))
        started = time.time()
        child = subprocess.Popen([WEIR, "run", script, "-p", "2"], stderr=subprocess.PIPE)
        cpu = 0.0
        while child.poll() is None:
            try:
                cpu = cpu_seconds(child.pid)
            except OSError:
                pass
            time.sleep(0.05)
        wall = time.time() - started
        err = child.stderr.read().decode()
        if child.returncode != 0:
            sys.exit(f"weir failed: {err}")
        # The process reports its own CPU time at the end; prefer it to the last sample.
        if "cpu " in err:
            cpu = float(err.split("cpu ", 1)[1].split("s", 1)[0])
        return report(query, "weir", wall, cpu)


def run_flink(query):
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    config.set("parallelism.default", "2")
    config.set("table.exec.resource.default-parallelism", "2")
    *tables, insert = QUERIES[query]
    for statement in tables:
        env.execute_sql(statement)
    java = descendants(os.getpid())
    before = sum(cpu_seconds(p) for p in java)
    started = time.time()
    env.execute_sql(insert).wait()
    wall = time.time() - started
    cpu = sum(cpu_seconds(p) for p in java) - before
    return report(query, "flink", wall, cpu)


if __name__ == "__main__":
    for query in QUERY_NAMES:
        weir = run_weir(query)
        flink = run_flink(query)
        if weir and flink:
            print(f"{query} weir_over_flink_per_core_ratio={weir / flink:.2f}", flush=True)
