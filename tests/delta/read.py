"""Reads a Delta table with delta-rs's Python package (`pip install deltalake pyarrow`),
independently of Weir, for the Delta tests (tests/delta.rs).

    read.py TABLE rows            every row of the latest snapshot, one JSON object a line, sorted
    read.py TABLE summary         {"version", "files", "records_in_stats", "partitions",
                                  "operations"}
    read.py TABLE watch SECONDS STOP
                                  reads the latest snapshot again and again for at most
                                  SECONDS, until the file STOP exists;
                                  prints {"reads", "versions", "max_rows"} and fails if a
                                  snapshot holds a row twice, misses a row an earlier
                                  snapshot held, or cannot be read whole

    read.py TABLE write ROWS N    writes a table with delta-rs (id BIGINT, name STRING, day
                                  STRING, partitioned by day) in N appends, then deletes the
                                  rows whose id is a multiple of 5 up to 300

S3 settings come from AWS_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
AWS_REGION (a local server without TLS).
"""

import json
import os
import sys
import time

import pyarrow as pa
from deltalake import DeltaTable


def storage_options():
    if "AWS_ENDPOINT" not in os.environ:
        return None
    return {
        "AWS_ENDPOINT_URL": os.environ["AWS_ENDPOINT"],
        "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", ""),
        "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
        "AWS_REGION": os.environ.get("AWS_REGION", "us-east-1"),
        "AWS_ALLOW_HTTP": "true",
    }


def table(uri):
    return DeltaTable(uri, storage_options=storage_options())


def rows(dt):
    out = []
    for row in dt.to_pyarrow_table().to_pylist():
        out.append(json.dumps(row, sort_keys=True, default=str))
    out.sort()
    return out


def summary(dt):
    log = dt.history()
    txns = []
    for entry in sorted(log, key=lambda e: e["version"]):
        txns.append(entry.get("operation"))
    files = dt.file_uris()
    actions = pa.table(dt.get_add_actions(flatten=True))
    counts = actions.column("num_records").to_pylist() if "num_records" in actions.column_names else []
    return {
        "version": dt.version(),
        "files": len(files),
        "records_in_stats": sum(c or 0 for c in counts),
        "partitions": dt.metadata().partition_columns,
        "operations": txns,
    }


def watch(uri, seconds, stop):
    seen = set()
    reads = 0
    versions = set()
    deadline = time.time() + seconds
    while time.time() < deadline and not os.path.exists(stop):
        try:
            dt = table(uri)
        except Exception:  # the table does not exist yet
            time.sleep(0.05)
            continue
        got = rows(dt)
        reads += 1
        versions.add(dt.version())
        now = set(got)
        if len(now) != len(got):
            sys.exit(f"version {dt.version()}: a row is there twice")
        lost = seen - now
        if lost:
            sys.exit(f"version {dt.version()}: {len(lost)} rows of an earlier snapshot are gone")
        seen = now
        time.sleep(0.02)
    print(json.dumps({"reads": reads, "versions": len(versions), "max_rows": len(seen)}))


def write(uri, rows, appends):
    from deltalake import write_deltalake

    ids = list(range(1, rows + 1))
    size = -(-len(ids) // appends)
    for start in range(0, len(ids), size):
        chunk = ids[start : start + size]
        data = pa.table(
            {
                "id": pa.array(chunk, pa.int64()),
                "name": pa.array([f"n{i * 7}" for i in chunk], pa.string()),
                "day": pa.array([f"d{i % 3}" for i in chunk], pa.string()),
            }
        )
        write_deltalake(uri, data, mode="append", partition_by=["day"])
    table(uri).delete("id % 5 = 0 AND id <= 300")


def main():
    uri, mode = sys.argv[1], sys.argv[2]
    if mode == "rows":
        for line in rows(table(uri)):
            print(line)
    elif mode == "summary":
        print(json.dumps(summary(table(uri))))
    elif mode == "write":
        write(uri, int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "watch":
        watch(uri, float(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
    # Leave without tearing the interpreter down: with pyarrow and deltalake loaded, the
    # teardown sometimes aborts ("terminate called without an active exception").
    sys.stdout.flush()
    os._exit(0)
