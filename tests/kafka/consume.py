"""Print the value of every record of a topic, read with Python's confluent-kafka.

Usage: python3 tests/kafka/consume.py BOOTSTRAP TOPIC

A second client's view of what a Weir sink wrote (the first is Weir's own source): every
partition is read from its first offset until the client reports its end. Records of
transactions are read as the broker serves them; see committed.py for a reader that
drops aborted transactions itself.
"""

import sys

from confluent_kafka import Consumer, KafkaError, TopicPartition


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "weir-tests-consume",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    metadata = consumer.list_topics(topic, timeout=10)
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        sys.exit(f"consume.py: topic '{topic}' does not exist on {bootstrap}")
    pending = set(info.partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in pending])
    idle = 0
    while pending:
        message = consumer.poll(1.0)
        if message is None:
            idle += 1
            if idle > 30:
                sys.exit(f"consume.py: no end reached for partitions {sorted(pending)}")
            continue
        idle = 0
        if message.error():
            if message.error().code() == KafkaError._PARTITION_EOF:
                pending.discard(message.partition())
                continue
            sys.exit(f"consume.py: {message.error()}")
        value = message.value()
        print("" if value is None else value.decode("utf-8", errors="replace"))
    consumer.close()


if __name__ == "__main__":
    main()
