package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"
)

// producer is a franz-go client producing to partition 0 of topic: a transactional
// one when txnID is set, as a user's confluent-kafka or Java producer with a
// transactional.id.
func producer(t *testing.T, c cluster, topic, txnID string) *kgo.Client {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(c.brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner())}
	if txnID != "" {
		opts = append(opts, kgo.TransactionalID(txnID), kgo.TransactionTimeout(time.Minute))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produce(t *testing.T, ctx context.Context, cl *kgo.Client, values ...string) {
	t.Helper()
	for _, v := range values {
		if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce %q: %v", v, err)
		}
	}
}

// inTransaction produces values in a transaction of cl and commits or aborts it.
func inTransaction(t *testing.T, ctx context.Context, cl *kgo.Client, commit bool, values ...string) {
	t.Helper()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(t, ctx, cl, values...)
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatalf("end transaction (commit %v): %v", commit, err)
	}
}

// expectPayloads receives len(want) messages, acks them and checks their payloads
// in order.
func expectPayloads(t *testing.T, ch <-chan *message.Message, want ...string) {
	t.Helper()
	for _, w := range want {
		msg := receive(t, ch, 30*time.Second)
		msg.Ack()
		if string(msg.Payload) != w {
			t.Fatalf("got %q (%s), want %q", msg.Payload, msg.UUID, w)
		}
	}
}

// TestSubscriberReadsCommittedRecordsOnly produces to one partition the way a user's
// transactional producer does: a transaction committed, one aborted, records of no
// transaction, and one transaction left open. The subscriber delivers the committed
// records and those of no transaction, in offset order; never a record of an aborted
// transaction, nor the transaction markers the broker writes; and nothing from the
// open transaction on until it commits (kafka-go's Reader read uncommitted: it
// delivered the aborted and the open records, and the markers as records).
func TestSubscriberReadsCommittedRecordsOnly(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "txn-")
	sub := c.subscriber(t, "", nil)
	defer closeAll(t, sub)
	if err := sub.SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t, 2*time.Minute)
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	plain := producer(t, c, topic, "")
	txn := producer(t, c, topic, uniqueName(t, "txn-a-"))
	open := producer(t, c, topic, uniqueName(t, "txn-b-"))

	inTransaction(t, ctx, txn, true, "committed-1", "committed-2")
	inTransaction(t, ctx, txn, false, "aborted-1", "aborted-2")
	produce(t, ctx, plain, "plain-1")
	expectPayloads(t, ch, "committed-1", "committed-2", "plain-1")

	// A transaction left open holds back every later record of the partition.
	if err := open.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(t, ctx, open, "open-1")
	produce(t, ctx, plain, "plain-2")
	noMessage(t, ch, 2*time.Second)
	if err := open.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	expectPayloads(t, ch, "open-1", "plain-2")

	// The producer's next transaction after an aborted one is delivered.
	inTransaction(t, ctx, txn, false, "aborted-3")
	inTransaction(t, ctx, txn, true, "committed-3")
	produce(t, ctx, plain, "plain-3")
	expectPayloads(t, ch, "committed-3", "plain-3")
	noMessage(t, ch, time.Second)
}
