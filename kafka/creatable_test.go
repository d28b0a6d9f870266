package kafka_test

import (
	"errors"
	"testing"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
)

// TopicLayout.Creatable refuses to create a missing topic: Publish fails with
// its error, and creates nothing. A topic that exists is used unasked, also
// one created by another client after the Publisher read the cluster's
// metadata (the check reads it afresh).
func TestCreatableRefusesAMissingTopicOnly(t *testing.T) {
	c := newCluster(t)
	refused := errors.New("not this one")
	missing, made, ok := uniqueName(t, "missing"), uniqueName(t, "made"), uniqueName(t, "ok")
	var asked []string
	pub := c.publisher(t, func(cfg *kafka.PublisherConfig) {
		cfg.Topics.Creatable = func(topic string, tc kafka.TopicConfig) (kafka.TopicConfig, error) {
			asked = append(asked, topic)
			if topic == ok {
				tc.Partitions = 1
				return tc, nil
			}
			return tc, refused
		}
	})
	defer closeAll(t, pub)
	err := pub.Publish(missing, sessionMessage("s", "one"))
	if !errors.Is(err, refused) || !errors.Is(err, kafkago.UnknownTopicOrPartition) {
		t.Fatalf("publish to a refused missing topic: %v; want the refusal and UnknownTopicOrPartition", err)
	}
	conn, err := kafkago.Dial("tcp", c.brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if parts, err := conn.ReadPartitions(missing); err == nil && len(parts) > 0 {
		t.Fatalf("the refused topic %s was created (%d partitions)", missing, len(parts))
	}
	// Made by an operator after the publisher's transport cached the metadata.
	if err := conn.CreateTopics(kafkago.TopicConfig{Topic: made, NumPartitions: 2, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(made, sessionMessage("s", "two")); err != nil {
		t.Fatalf("publish to an existing topic the policy refuses: %v", err)
	}
	if err := pub.Publish(ok, sessionMessage("s", "three")); err != nil {
		t.Fatalf("publish to an allowed missing topic: %v", err)
	}
	if parts, err := conn.ReadPartitions(ok); err != nil || len(parts) != 1 {
		t.Fatalf("the allowed topic %s: %d partitions, %v; want the policy's 1", ok, len(parts), err)
	}
	for _, topic := range asked {
		if topic == made {
			t.Errorf("the policy was asked about %s, which existed", made)
		}
	}
}
