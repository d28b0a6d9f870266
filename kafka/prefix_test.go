package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
)

// topicPrefix returns want on kfake (a fresh broker per test) and a unique prefix
// starting with want on a real broker, where earlier runs left their topics.
func (c cluster) topicPrefix(t testing.TB, want string) string {
	t.Helper()
	if !c.real {
		return want
	}
	return uniqueName(t, strings.TrimSuffix(want, ".")) + "."
}

func pubPrefix(prefix string) func(*kafka.PublisherConfig) {
	return func(cfg *kafka.PublisherConfig) { cfg.Topics.Prefix = prefix }
}

func subPrefix(prefix string) func(*kafka.SubscriberConfig) {
	return func(cfg *kafka.SubscriberConfig) { cfg.Topics.Prefix = prefix }
}

// Two deployments on one broker with different prefixes use the same logical topic
// and the same consumer group name, and neither receives the other's messages.
func TestTopicPrefixSeparatesDeployments(t *testing.T) {
	c := newCluster(t)
	prefixA, prefixB := c.topicPrefix(t, "a."), c.topicPrefix(t, "b.")
	pubA := c.publisher(t, pubPrefix(prefixA))
	pubB := c.publisher(t, pubPrefix(prefixB))
	defer closeAll(t, pubA, pubB)
	// One key, one partition: on a shared topic, b1 would come between a1 and a2.
	for _, m := range []struct {
		pub     *kafka.Publisher
		payload string
	}{{pubA, "a1"}, {pubB, "b1"}, {pubA, "a2"}, {pubB, "b2"}} {
		if err := m.pub.Publish(messages.TopicTasks, sessionMessage("s-1", m.payload)); err != nil {
			t.Fatal(err)
		}
	}
	for name, group := range map[string]string{"no group": "", "one group name": uniqueName(t, "g-")} {
		t.Run(name, func(t *testing.T) {
			subA := c.subscriber(t, group, subPrefix(prefixA))
			subB := c.subscriber(t, group, subPrefix(prefixB))
			defer closeAll(t, subA, subB)
			ctx := testContext(t, 2*time.Minute)
			for sub, want := range map[*kafka.Subscriber][]string{subA: {"a1", "a2"}, subB: {"b1", "b2"}} {
				ch, err := sub.Subscribe(ctx, messages.TopicTasks)
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range want {
					msg := receive(t, ch, time.Minute)
					msg.Ack()
					if string(msg.Payload) != w {
						t.Fatalf("received %q, want %q: the prefixes do not separate the deployments", msg.Payload, w)
					}
				}
			}
		})
	}
}

// A message published with prefix "p." is on the Kafka topic "p.troupe.tasks", as
// any other client reads it; the topic is created with the layout of the logical
// name; a subscriber with the prefix receives it under the logical name, and its
// listener and RecordInfo name the topics as documented.
func TestTopicPrefixOnTheWire(t *testing.T) {
	c := newCluster(t)
	prefix := c.topicPrefix(t, "p.")
	wire := prefix + messages.TopicTasks
	layout := kafka.TopicLayout{
		Prefix:           prefix,
		InitializeTopics: true,
		Topics:           map[string]kafka.TopicConfig{messages.TopicTasks: {Partitions: 3}},
		Default:          kafka.TopicConfig{Partitions: 2},
	}
	pub := c.publisher(t, func(cfg *kafka.PublisherConfig) { cfg.Topics = layout })
	defer closeAll(t, pub)
	sent := sessionMessage("s-9", `{"input":"2+2"}`)
	if err := pub.Publish(messages.TopicTasks, sent); err != nil {
		t.Fatal(err)
	}

	ctx := testContext(t, 2*time.Minute)
	// A transport of its own: kafka-go's default one is shared in the process and
	// caches metadata for seconds, without the topic just created.
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafkago.Client{Addr: kafkago.TCP(c.brokers...), Timeout: 10 * time.Second, Transport: tr}
	md, err := client.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{wire}})
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Topics) != 1 || md.Topics[0].Error != nil || len(md.Topics[0].Partitions) != 3 {
		t.Fatalf("metadata of %s: %+v; want 3 partitions, as the layout has for %s", wire, md.Topics, messages.TopicTasks)
	}
	if !c.real { // a fresh broker: nothing was written without the prefix
		md, err := client.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{messages.TopicTasks}})
		if err != nil {
			t.Fatal(err)
		}
		if len(md.Topics) == 1 && md.Topics[0].Error == nil {
			t.Errorf("the unprefixed topic %s exists", messages.TopicTasks)
		}
	}

	rd := kafkago.NewReader(kafkago.ReaderConfig{Brokers: c.brokers, Topic: wire, Partition: kafka.PartitionOf("s-9", 3), MaxWait: 100 * time.Millisecond})
	defer rd.Close()
	rec, err := rd.ReadMessage(ctx)
	if err != nil {
		t.Fatalf("read %s: %v", wire, err)
	}
	uuid := ""
	for _, h := range rec.Headers {
		if h.Key == kafka.HeaderUUID {
			uuid = string(h.Value)
		}
	}
	if rec.Topic != wire || string(rec.Key) != "s-9" || string(rec.Value) != `{"input":"2+2"}` || uuid != sent.UUID {
		t.Errorf("record on %s: topic %s key %q value %q uuid %q", wire, rec.Topic, rec.Key, rec.Value, uuid)
	}

	log := &rebalanceLog{}
	sub := c.subscriber(t, uniqueName(t, "g-"), func(cfg *kafka.SubscriberConfig) {
		cfg.Topics = layout
		cfg.Rebalance = memberListener{log: log, name: "m"}
	})
	defer closeAll(t, sub)
	ch, err := sub.Subscribe(ctx, messages.TopicTasks)
	if err != nil {
		t.Fatal(err)
	}
	msg := receive(t, ch, time.Minute)
	msg.Ack()
	ri, ok := kafka.Record(msg.Context())
	if msg.UUID != sent.UUID || !ok || ri.Topic != wire {
		t.Errorf("received %s from %+v; want %s from %s", msg.UUID, ri, sent.UUID, wire)
	}
	if a, ok := log.holding("m"); !ok || a.Topic != messages.TopicTasks || a.Total != 3 {
		t.Errorf("Assigned %+v; want the logical topic %s with 3 partitions", a, messages.TopicTasks)
	}
}

// Topic names Kafka would refuse fail with ErrInvalidTopic before anything is
// sent (the broker address here accepts no connection).
func TestTopicPrefixValidation(t *testing.T) {
	brokers := []string{"127.0.0.1:1"}
	for _, prefix := range []string{"bad/", "prod ", "é.", strings.Repeat("p", kafka.MaxTopicNameLength)} {
		if err := (kafka.TopicLayout{Prefix: prefix}).Validate(); !errors.Is(err, kafka.ErrInvalidTopic) {
			t.Errorf("prefix %q: Validate: %v", prefix, err)
		}
		if _, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, Topics: kafka.TopicLayout{Prefix: prefix}}, nil); !errors.Is(err, kafka.ErrInvalidTopic) {
			t.Errorf("prefix %q: NewPublisher: %v", prefix, err)
		}
		if _, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: brokers, Topics: kafka.TopicLayout{Prefix: prefix}}, nil); !errors.Is(err, kafka.ErrInvalidTopic) {
			t.Errorf("prefix %q: NewSubscriber: %v", prefix, err)
		}
	}
	for _, prefix := range []string{"", "prod.", "T_1-x.", strings.Repeat("p", kafka.MaxTopicNameLength-1)} {
		if err := (kafka.TopicLayout{Prefix: prefix}).Validate(); err != nil {
			t.Errorf("prefix %q: %v", prefix, err)
		}
	}

	layout := kafka.TopicLayout{Prefix: strings.Repeat("p", kafka.MaxTopicNameLength-len(messages.TopicTasks)) + "."}
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, Topics: layout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: brokers, Topics: layout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(t, pub, sub)
	for _, topic := range []string{messages.TopicTasks, "tasks/1"} {
		err := pub.Publish(topic, sessionMessage("s-1", "x"))
		if !errors.Is(err, kafka.ErrInvalidTopic) || !strings.Contains(err.Error(), topic) {
			t.Errorf("Publish(%q): %v; want ErrInvalidTopic naming the topic", topic, err)
		}
		if _, err := sub.Subscribe(context.Background(), topic); !errors.Is(err, kafka.ErrInvalidTopic) {
			t.Errorf("Subscribe(%q): %v", topic, err)
		}
		if err := sub.SubscribeInitialize(topic); !errors.Is(err, kafka.ErrInvalidTopic) {
			t.Errorf("SubscribeInitialize(%q): %v", topic, err)
		}
	}
}
