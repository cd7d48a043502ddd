"""OVER ROWS aggregate per key, Weir against Apache Flink on the same generated rows.

Each bid (`auction` random in [0, 10000), `price` random, `ts` one millisecond after the
previous bid) gets the average and highest price of its auction's last ten bids:

    SELECT auction, price, AVG(price) OVER w, MAX(price) OVER w FROM bid
    WINDOW w AS (PARTITION BY auction ORDER BY ts ROWS BETWEEN 9 PRECEDING AND CURRENT ROW)

into a blackhole sink, at parallelism 2, once through `weir run` and once through PyFlink's
local mini-cluster (Flink's own datagen; Java 17). Prints, per engine, wall seconds,
rows/s, CPU seconds of the engine's processes and rows/s per CPU second (per core).

    pip install apache-flink==2.3.0
    python3 benches/flink/over_rows.py [ROWS] [path/to/weir]

ROWS defaults to 9 200 000 (the bids of 10M Nexmark events); the binary to
target/release/weir under $CARGO_TARGET_DIR (`cargo build --profile bench --bin weir`).
"""

import os
import subprocess
import sys
import tempfile
import time

ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 9_200_000
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(os.path.dirname(__file__), "../../target"))
WEIR = sys.argv[2] if len(sys.argv) > 2 else os.path.join(TARGET, "release/weir")

DDL = f"""
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
SINK = """
CREATE TABLE sink (auction BIGINT, price BIGINT, avg_price BIGINT, max_price BIGINT)
WITH ('connector' = 'blackhole')"""
QUERY = """
INSERT INTO sink
SELECT auction, price, AVG(price) OVER w, MAX(price) OVER w FROM bid
WINDOW w AS (PARTITION BY auction ORDER BY ts ROWS BETWEEN 9 PRECEDING AND CURRENT ROW)"""


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


def report(engine, wall, cpu):
    per_core = f"{ROWS / cpu:.0f}" if cpu else "?"
    print(
        f"over_rows engine={engine} rows={ROWS} wall_s={wall:.2f} rows_per_s={ROWS / wall:.0f} "
        f"cpu_s={cpu:.1f} rows_per_s_per_core={per_core}",
        flush=True,
    )
    return ROWS / cpu if cpu else None


def run_weir():
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "over.sql")
        with open(script, "w") as f:
            f.write(f"{DDL};\n{SINK};\n{QUERY};\n")
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
        return report("weir", wall, cpu)


def run_flink():
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    config.set("parallelism.default", "2")
    config.set("table.exec.resource.default-parallelism", "2")
    env.execute_sql(DDL)
    env.execute_sql(SINK)
    java = descendants(os.getpid())
    before = sum(cpu_seconds(p) for p in java)
    started = time.time()
    env.execute_sql(QUERY).wait()
    wall = time.time() - started
    cpu = sum(cpu_seconds(p) for p in java) - before
    return report("flink", wall, cpu)


if __name__ == "__main__":
    weir = run_weir()
    flink = run_flink()
    if weir and flink:
        print(f"over_rows weir_over_flink_per_core_ratio={weir / flink:.2f}")
