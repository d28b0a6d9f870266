"""Produce tasks to Troupe with confluent-kafka's Producer in its default settings.

Usage: produce.py BROKERS TOPIC < lines

Each line of standard input is KEY|VALUE; an empty KEY writes the record without a
key. The producer keeps librdkafka's default partitioner (consistent_random), as a
user's producer would. Exits non-zero if a record was not delivered.
"""

import sys

from confluent_kafka import Producer


def main():
    brokers, topic = sys.argv[1], sys.argv[2]
    producer = Producer({"bootstrap.servers": brokers})
    failed = []

    def delivered(err, msg):
        if err is not None:
            failed.append(err)

    for line in sys.stdin:
        line = line.rstrip("\n")
        if not line:
            continue
        key, _, value = line.partition("|")
        producer.produce(topic, value=value.encode(), key=key.encode() if key else None, on_delivery=delivered)
    left = producer.flush(30)
    if left or failed:
        print(f"not delivered: {left} in the queue, errors {failed}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
