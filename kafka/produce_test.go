package kafka_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
)

// One Publish to every partition, with more records per partition than BatchSize,
// goes out as one request per broker and round: every record arrives once, on its
// session's partition, each session's in the order given.
func TestPublishManyPartitionsPastBatchSize(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "produce-")
	pub := c.publisher(t, func(cfg *kafka.PublisherConfig) { cfg.BatchSize = 3 })
	sub := c.subscriber(t, "", func(cfg *kafka.SubscriberConfig) { cfg.ConsumerGroup = ""; cfg.InitialOffset = kafka.FromEarliest })
	defer closeAll(t, pub, sub)
	const sessions, each = 10, 7
	var msgs []*message.Message
	for i := range each {
		for s := range sessions {
			msgs = append(msgs, sessionMessage(fmt.Sprintf("s-%d", s), fmt.Sprintf("%d", i)))
		}
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatalf("publish: %v", err)
	}
	ch, err := sub.Subscribe(testContext(t, time.Minute), topic)
	if err != nil {
		t.Fatal(err)
	}
	next := map[string]int{}
	for range sessions * each {
		msg := receive(t, ch, 30*time.Second)
		sid := msg.Metadata.Get("session_id")
		if got, want := string(msg.Payload), fmt.Sprint(next[sid]); got != want {
			t.Fatalf("session %s: record %s, want %s (order per session)", sid, got, want)
		}
		next[sid]++
		ri, _ := kafka.Record(msg.Context())
		if want := kafka.PartitionOf(sid, testPartitions); ri.Partition != want {
			t.Errorf("session %s on partition %d, want %d", sid, ri.Partition, want)
		}
		msg.Ack()
	}
	noMessage(t, ch, 300*time.Millisecond)
}

// A record larger than BatchBytes is refused before anything is sent.
func TestPublishTooLarge(t *testing.T) {
	c := newCluster(t)
	pub := c.publisher(t, func(cfg *kafka.PublisherConfig) { cfg.BatchBytes = 1000 })
	defer closeAll(t, pub)
	err := pub.Publish(uniqueName(t, "large-"), sessionMessage("s-1", "small"), sessionMessage("s-1", strings.Repeat("x", 2000)))
	var tooLarge kafkago.MessageTooLargeError
	if !errors.As(err, &tooLarge) {
		t.Fatalf("publish: %v, want a MessageTooLargeError", err)
	}
}

// PublishToPartition puts every record on the partition it is given, whatever
// its key, and refuses a partition the topic does not have.
func TestPublishToPartition(t *testing.T) {
	c := newCluster(t)
	topic := uniqueName(t, "to-partition-")
	pub := c.publisher(t, nil)
	sub := c.subscriber(t, "", func(cfg *kafka.SubscriberConfig) { cfg.ConsumerGroup = ""; cfg.InitialOffset = kafka.FromEarliest })
	defer closeAll(t, pub, sub)
	var msgs []*message.Message
	for s := range 5 {
		msgs = append(msgs, sessionMessage(fmt.Sprintf("s-%d", s), fmt.Sprint(s)))
	}
	const to = 1
	if err := pub.PublishToPartition(topic, to, msgs...); err != nil {
		t.Fatalf("publish: %v", err)
	}
	ch, err := sub.Subscribe(testContext(t, time.Minute), topic)
	if err != nil {
		t.Fatal(err)
	}
	for i := range msgs {
		msg := receive(t, ch, 30*time.Second)
		if ri, _ := kafka.Record(msg.Context()); ri.Partition != to || string(msg.Payload) != fmt.Sprint(i) {
			t.Errorf("record %q on partition %d, want %q on %d", msg.Payload, ri.Partition, fmt.Sprint(i), to)
		}
		msg.Ack()
	}
	for _, p := range []int{testPartitions, -1} {
		if err := pub.PublishToPartition(topic, p, sessionMessage("s-1", "x")); !errors.Is(err, kafka.ErrUnknownPartition) {
			t.Errorf("publish to partition %d of %d: %v, want ErrUnknownPartition", p, testPartitions, err)
		}
	}
}
