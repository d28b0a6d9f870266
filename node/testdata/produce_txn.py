"""Produce tasks to Troupe in transactions, with confluent-kafka's Producer in its
default settings and a transactional.id.

Usage: produce_txn.py BROKERS TOPIC TRANSACTIONAL_ID < lines

Each line of standard input is END|KEY|VALUE: the record goes in a transaction of its
own, which END (commit or abort) ends once the record is on the broker. Exits
non-zero if a call fails.
"""

import sys

from confluent_kafka import Producer


def main():
    brokers, topic, txn_id = sys.argv[1], sys.argv[2], sys.argv[3]
    producer = Producer({"bootstrap.servers": brokers, "transactional.id": txn_id})
    producer.init_transactions(30)
    for line in sys.stdin:
        line = line.rstrip("\n")
        if not line:
            continue
        end, key, value = line.split("|", 2)
        producer.begin_transaction()
        producer.produce(topic, value=value.encode(), key=key.encode())
        # On the broker before the transaction ends: abort_transaction would purge
        # a record still queued, and the broker would never hold it.
        if producer.flush(30):
            sys.exit("a record was not delivered within 30 s")
        if end == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


if __name__ == "__main__":
    main()
