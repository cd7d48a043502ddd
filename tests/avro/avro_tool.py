#!/usr/bin/env python3
"""Avro written and read by an independent implementation (fastavro), for Weir's tests.

The schema is the one Flink derives for the table
    (id BIGINT NOT NULL, name STRING, price DECIMAL(10, 2), ts TIMESTAMP(3))
and the rows are fixed: id 1..N, name "n<id>" (NULL when id % 5 == 0), price id * 1.01,
ts 2026-01-01 00:00:00 UTC plus id seconds.

Usage:
    avro_tool.py write-file PATH N        an object container file (deflate)
    avro_tool.py read-file DIR            the records of DIR's visible .avro files
    avro_tool.py produce BOOTSTRAP TOPIC N     one raw binary record per message
    avro_tool.py read-topic BOOTSTRAP TOPIC    the committed messages' records

Records print as JSON lines {"id", "name", "price" (text), "ts" (epoch ms)}, sorted by id.
Needs fastavro==1.12.1 (and confluent-kafka, kafka-python for the topic commands).
"""
import datetime
import decimal
import io
import json
import os
import sys

import fastavro

SCHEMA = fastavro.parse_schema({
    "type": "record", "name": "record", "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"], "default": None},
        {"name": "price", "type": ["null", {"type": "bytes", "logicalType": "decimal",
                                            "precision": 10, "scale": 2}], "default": None},
        {"name": "ts", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}],
         "default": None},
    ]})
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def rows(n):
    for i in range(1, n + 1):
        yield {"id": i, "name": None if i % 5 == 0 else f"n{i}",
               "price": decimal.Decimal(i * 101) / 100,
               "ts": EPOCH + datetime.timedelta(seconds=i)}


def show(records):
    out = []
    for r in records:
        ts = r["ts"]
        out.append({"id": r["id"], "name": r["name"],
                    "price": None if r["price"] is None else f"{r['price']:.2f}",
                    "ts": None if ts is None else int(ts.timestamp() * 1000)})
    for r in sorted(out, key=lambda r: r["id"]):
        print(json.dumps(r))


def main():
    cmd = sys.argv[1]
    if cmd == "write-file":
        with open(sys.argv[2], "wb") as f:
            fastavro.writer(f, SCHEMA, rows(int(sys.argv[3])), codec="deflate")
    elif cmd == "read-file":
        records = []
        for name in sorted(os.listdir(sys.argv[2])):
            if name.endswith(".avro") and not name.startswith((".", "_")):
                with open(os.path.join(sys.argv[2], name), "rb") as f:
                    reader = fastavro.reader(f)
                    assert reader.writer_schema["name"] == "record", reader.writer_schema
                    records.extend(reader)
        show(records)
    elif cmd == "produce":
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": sys.argv[2], "batch.num.messages": 1, "linger.ms": 0})
        for r in rows(int(sys.argv[4])):
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, SCHEMA, r)
            p.produce(sys.argv[3], value=buf.getvalue(), partition=r["id"] % 2)
            p.flush()
    elif cmd == "read-topic":
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "kafka"))
        import committed
        values = committed.topic_values(sys.argv[2], sys.argv[3])
        show(fastavro.schemaless_reader(io.BytesIO(v), SCHEMA) for v in values)
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
