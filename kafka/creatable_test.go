package kafka_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

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

// TopicLayout.Settled is told how each creation Creatable allowed ended: created
// for a topic the publisher made, not for one the broker refused to create (a
// policy), so that a policy counting the topics it let be created
// (node.ReplyTopics) counts only those that exist. It is not told about a topic
// Creatable refused, nor about one that existed.
func TestSettledSaysWhetherTheTopicWasCreated(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	badName, okName, refusedName := uniqueName(t, "bad"), uniqueName(t, "ok"), uniqueName(t, "refused")
	c.ControlKey(int16(kmsg.CreateTopics), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.CreateTopicsRequest)
		if len(req.Topics) != 1 || req.Topics[0].Topic != badName {
			return nil, nil, false // created as usual
		}
		c.KeepControl()
		res := req.ResponseKind().(*kmsg.CreateTopicsResponse)
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = badName
		rt.ErrorCode = 44 // POLICY_VIOLATION
		res.Topics = append(res.Topics, rt)
		return res, nil, true
	})
	var mu sync.Mutex
	settled := map[string][]bool{}
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{
		Brokers: c.ListenAddrs(),
		Topics: kafka.TopicLayout{InitializeTopics: true, Default: kafka.TopicConfig{Partitions: 1},
			Creatable: func(topic string, tc kafka.TopicConfig) (kafka.TopicConfig, error) {
				if topic == refusedName {
					return tc, errors.New("not this one")
				}
				return tc, nil
			},
			Settled: func(topic string, created bool) {
				mu.Lock()
				settled[topic] = append(settled[topic], created)
				mu.Unlock()
			}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	if err := pub.Publish(badName, sessionMessage("s", "one")); err == nil {
		t.Fatalf("publish to a topic the broker refuses to create: no error")
	}
	if err := pub.Publish(okName, sessionMessage("s", "two")); err != nil {
		t.Fatalf("publish to an allowed missing topic: %v", err)
	}
	if err := pub.Publish(okName, sessionMessage("s", "three")); err != nil {
		t.Fatalf("publish to the topic created: %v", err)
	}
	if err := pub.Publish(refusedName, sessionMessage("s", "four")); err == nil {
		t.Fatalf("publish to a refused missing topic: no error")
	}
	mu.Lock()
	defer mu.Unlock()
	if got := fmt.Sprint(settled[badName]); got != "[false]" {
		t.Errorf("Settled for the topic the broker refused: %s; want [false]", got)
	}
	if got := fmt.Sprint(settled[okName]); got != "[true]" {
		t.Errorf("Settled for the topic created: %s; want [true] (once: it exists after)", got)
	}
	if got, ok := settled[refusedName]; ok {
		t.Errorf("Settled for a topic Creatable refused: %v; want none", got)
	}
}
