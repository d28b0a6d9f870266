package kafka_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
)

// groupFor names the consumer group of one universal-suite test: every subscriber a
// test builds (the suite passes the test's own t) joins the same group, as the
// nodes of one deployment do, so that a subscriber that follows a closed one goes
// on from the offsets it committed.
func groupFor(t *testing.T) string {
	sum := sha256.Sum256([]byte(t.Name()))
	return "cg-" + hex.EncodeToString(sum[:8])
}

// TestPubSub runs Watermill's universal suite with consumer groups, on a topic
// prefix (TopicLayout.Prefix): the suite's topic names are logical names, each a
// prefixed Kafka topic. The other suites run without a prefix. Its subscribers have
// 64 messages in flight per partition (SubscriberConfig.MaxInFlight), as a node's
// tasks group; TestPubSubWithoutGroup's have the default, one.
//
// Declared features:
//   - ConsumerGroups: groups share partitions and commit offsets.
//   - Persistent: records outlive publishers and subscribers.
//   - GuaranteedOrder false: order holds per partition, i.e. per key; the suite's
//     messages have no key. TestPubSubOrdered covers ordering with keys.
//   - ExactlyOnceDelivery false: delivery is at least once (redelivery after a
//     failed commit or a rebalance; producer retries can duplicate).
//   - NewSubscriberReceivesOldMessages false here: a new member of an existing
//     group starts from the group's offsets. A subscriber without a group (or with
//     a new group) reads old records: TestPubSubWithoutGroup.
func TestPubSub(t *testing.T) {
	c := newCluster(t)
	features := tests.Features{
		ConsumerGroups: true,
		Persistent:     true,
	}
	prefix := c.topicPrefix(t, "suite.")
	sub := func(cfg *kafka.SubscriberConfig) {
		subPrefix(prefix)(cfg)
		cfg.MaxInFlight = 64
	}
	ctor := func(t *testing.T) (message.Publisher, message.Subscriber) {
		return c.publisher(t, pubPrefix(prefix)), c.subscriber(t, groupFor(t), sub)
	}
	groupCtor := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		return c.publisher(t, pubPrefix(prefix)), c.subscriber(t, group, sub)
	}
	tests.TestPubSub(t, features, ctor, groupCtor)
}

// TestPubSubWithoutGroup runs the universal suite with subscribers that have no
// consumer group: each reads every partition from the earliest record, so a new
// subscriber receives old messages.
func TestPubSubWithoutGroup(t *testing.T) {
	c := newCluster(t)
	features := tests.Features{
		Persistent:                       true,
		NewSubscriberReceivesOldMessages: true,
	}
	ctor := func(t *testing.T) (message.Publisher, message.Subscriber) {
		return c.publisher(t, nil), c.subscriber(t, "", nil)
	}
	tests.TestPubSub(t, features, ctor, nil)
}

// payloadKey keys records by payload, so that the suite's ordering tests (which
// group messages by payload) have keyed messages.
type payloadKey struct{ kafka.DefaultMarshaler }

func (m payloadKey) Marshal(topic string, msg *message.Message) (kafkago.Message, error) {
	rec, err := m.DefaultMarshaler.Marshal(topic, msg)
	rec.Key = msg.Payload
	return rec, err
}

// TestPubSubOrdered runs the suite's ordering tests with keyed messages: order is
// guaranteed per key (one key, one partition), with ten group members sharing the
// partitions. Delivery is in offset order with any MaxInFlight: the suite's
// TestPublishSubscribeInOrder runs with 64 messages in flight per partition. TestNoAck
// checks that nothing more comes while a message is not acked, which holds with
// MaxInFlight 1, the default.
func TestPubSubOrdered(t *testing.T) {
	c := newCluster(t)
	features := tests.Features{
		ConsumerGroups:  true,
		Persistent:      true,
		GuaranteedOrder: true,
	}
	ctor := func(maxInFlight int) tests.PubSubConstructor {
		return func(t *testing.T) (message.Publisher, message.Subscriber) {
			pub := c.publisher(t, func(cfg *kafka.PublisherConfig) { cfg.Marshaler = payloadKey{} })
			return pub, c.subscriber(t, groupFor(t), func(cfg *kafka.SubscriberConfig) { cfg.MaxInFlight = maxInFlight })
		}
	}
	for name, test := range map[string]struct {
		fn          func(*testing.T, tests.TestContext, tests.PubSubConstructor)
		maxInFlight int
	}{
		"TestPublishSubscribeInOrder": {tests.TestPublishSubscribeInOrder, 64},
		"TestNoAck":                   {tests.TestNoAck, 0},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test.fn(t, tests.TestContext{TestID: tests.NewTestID(), Features: features}, ctor(test.maxInFlight))
		})
	}
}
