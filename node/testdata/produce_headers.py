"""Produce records with headers to Troupe with confluent-kafka's Producer in its
default settings.

Usage: produce_headers.py BROKERS TOPIC < lines

Each line of standard input is a JSON object {"key": ..., "value": ..., "headers":
[[name, value], ...]}; a header may be given more than once, as librdkafka sends it.
Exits non-zero if a record was not delivered.
"""

import json
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
        if not line.strip():
            continue
        rec = json.loads(line)
        key = rec.get("key")
        headers = [(name, value.encode()) for name, value in rec.get("headers", [])]
        producer.produce(topic, value=rec["value"].encode(), key=key.encode() if key else None,
                         headers=headers, on_delivery=delivered)
    left = producer.flush(30)
    if left or failed:
        print(f"not delivered: {left} in the queue, errors {failed}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
