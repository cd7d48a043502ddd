#!/usr/bin/env python3
"""Print what a Kafka topic really holds as committed data, one JSON object per line.

Usage:
    python3 tests/kafka/committed.py BOOTSTRAP TOPIC [--uncommitted] [--timeout SECONDS]

Every partition is read from offset 0 to its high watermark with raw Fetch
requests (read_uncommitted), and the record batches are filtered here rather
than by the broker: the test broker, tansu 0.6.0, sends back an empty
aborted_transactions list, so its read_committed consumers see the records
of aborted transactions. The transaction markers it stores are correct, so:

  * a record in a non-transactional batch is always printed;
  * a record in a transactional batch is printed only if the next control
    (marker) batch from the same producer id in that partition is a COMMIT;
    if that marker is an ABORT the record is left out;
  * a transactional record with no marker yet (an open transaction) is left
    out. Non-transactional records written after an open transaction are still
    printed. A read_committed consumer would hold them back until that
    transaction ends (at the last stable offset).
  * control records are never printed, so offsets have gaps where they are.

With --uncommitted, every data record is printed, whatever its transaction.

Output: {"partition": p, "offset": o, "key": str|null, "value": str|null,
"timestamp": ms, "headers": {name: str|null}}, ordered by partition and then
offset. Keys, values and header values are decoded as UTF-8 with
errors='replace'. Exit status: 0 on success; 2 if the broker cannot be reached,
the topic does not exist, or the broker returns an error. In each error case a
message goes to stderr.

Needs kafka-python==3.0.12 (pip install kafka-python==3.0.12). This script uses
that release's kafka.net client and generated protocol classes, which other
releases may change. Batches compressed with lz4, snappy or zstd also need the
matching Python codec package; gzip works without one.
"""
import argparse
import json
import sys

from kafka.net.compat import KafkaNetClient
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.record import MemoryRecords

MAX_BYTES = 1 << 20
UNKNOWN_TOPIC_OR_PARTITION = 3


def fail(msg):
    print(f"committed.py: {msg}", file=sys.stderr)
    sys.exit(2)


def text(b):
    return None if b is None else bytes(b).decode("utf-8", errors="replace")


def read_partition(client, node, topic, topic_id, partition, timeout_ms):
    """Yield (batch, records) for every record batch in [0, high watermark)."""
    offset, high_watermark = 0, None
    wait_ms, stalls = 500, 0
    while high_watermark is None or offset < high_watermark:
        part = FetchRequest.FetchTopic.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=MAX_BYTES,
            current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1)
        # tansu 0.6.0 gathers records only for max_wait_ms: max_wait_ms=0 answers with no
        # partitions at all, and 1 ms finds no records when the log holds many small batches.
        # min_bytes=1 makes it answer as soon as it has some.
        req = FetchRequest(
            replica_id=-1, max_wait_ms=wait_ms, min_bytes=1, max_bytes=MAX_BYTES,
            isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
            topics=[FetchRequest.FetchTopic(topic=topic, topic_id=topic_id, partitions=[part])],
            forgotten_topics_data=[])
        resp = client.send_and_receive(node, req, timeout_ms=timeout_ms)
        if not resp.responses or not resp.responses[0].partitions:
            fail(f"fetch {topic}/{partition} at offset {offset}: empty response (error {resp.error_code})")
        data = resp.responses[0].partitions[0]
        if data.error_code:
            fail(f"fetch {topic}/{partition} at offset {offset}: broker error {data.error_code}")
        high_watermark = data.high_watermark
        records, start = MemoryRecords(bytes(data.records or b"")), offset
        while (batch := records.next_batch()) is not None:
            if batch.magic != 2:
                fail(f"{topic}/{partition}: message format v{batch.magic} is not supported")
            if not batch.validate_crc():
                fail(f"{topic}/{partition}: bad CRC in batch at offset {batch.base_offset}")
            if batch.last_offset >= offset:  # a batch may start before fetch_offset
                yield batch, list(batch)
                offset = batch.next_offset
        if offset == start and offset < high_watermark:
            # No records within max_wait_ms although the log holds more: wait longer.
            stalls += 1
            if stalls > 5:
                fail(f"{topic}/{partition}: no progress at offset {offset} (high watermark {high_watermark})")
            wait_ms = min(wait_ms * 2, 8000)
        else:
            stalls = 0


def committed_records(batches):
    """Yield the data records of committed transactions and of plain batches."""
    pending = {}  # producer id -> records of its still-undecided transaction
    out = []      # (records, decided) in log order; decided is None while pending
    for batch, records in batches:
        if not batch.is_transactional:
            out.append([records, True])
        elif batch.is_control_batch:
            commit = all(r.commit for r in records)  # one marker per control batch
            for entry in pending.pop(batch.producer_id, []):
                entry[1] = commit
        else:
            entry = [records, None]
            pending.setdefault(batch.producer_id, []).append(entry)
            out.append(entry)
    for records, decided in out:
        if decided:  # aborted (False) and still open (None) are left out
            yield from records


def topic_records(bootstrap, topic, uncommitted=False, timeout_ms=10_000):
    """Yield (partition, record) for every committed data record of the topic (every data
    record with uncommitted), by partition and then offset."""
    client = KafkaNetClient(bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms)
    try:
        client.check_version(timeout_ms=timeout_ms)
        node = client.least_loaded_node(bootstrap_fallback=True)
        meta = client.send_and_receive(node, MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
            allow_auto_topic_creation=False), timeout_ms=timeout_ms)
        t = meta.topics[0]
        if t.error_code == UNKNOWN_TOPIC_OR_PARTITION or not t.partitions:
            fail(f"topic {topic!r} does not exist on {bootstrap}")
        if t.error_code:
            fail(f"metadata for topic {topic!r}: broker error {t.error_code}")
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            batches = read_partition(client, p.leader_id, topic, t.topic_id,
                                     p.partition_index, timeout_ms)
            if uncommitted:
                records = (r for b, rs in batches if not b.is_control_batch for r in rs)
            else:
                records = committed_records(batches)
            for r in records:
                yield p.partition_index, r
    except SystemExit:
        raise
    except Exception as e:  # kafka-python raises KafkaTimeoutError, KafkaConnectionError, ...
        fail(f"talking to the Kafka broker at {bootstrap}: {e!r}")
    finally:
        client.close()


def topic_values(bootstrap, topic):
    """The raw values (bytes) of the topic's committed records."""
    return [bytes(r.value) for _, r in topic_records(bootstrap, topic) if r.value is not None]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bootstrap", help="host:port of a broker")
    ap.add_argument("topic")
    ap.add_argument("--uncommitted", action="store_true",
                    help="print every data record, including aborted and open transactions")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per broker call (default 10)")
    args = ap.parse_args()
    records = topic_records(args.bootstrap, args.topic, args.uncommitted,
                            int(args.timeout * 1000))
    for partition, r in records:
        print(json.dumps({
            "partition": partition, "offset": r.offset,
            "key": text(r.key), "value": text(r.value), "timestamp": r.timestamp,
            "headers": {k: text(v) for k, v in r.headers}}, ensure_ascii=False))


if __name__ == "__main__":
    main()
