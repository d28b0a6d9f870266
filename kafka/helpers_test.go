package kafka_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/troupe-run/troupe/kafka"
)

// Environment variables the tests read.
const (
	// envKafka names a real broker (host:port[,host:port...]). When unset, the tests
	// run against kfake, franz-go's in-process Kafka.
	envKafka = "TROUPE_TEST_KAFKA"
	// envKafkaControl=1 allows tests to stop and start that broker with
	// deploy/kafka.sh (which reads TROUPE_DEPLOY_RUN, KAFKA_PORT, ... as usual).
	envKafkaControl = "TROUPE_TEST_KAFKA_CONTROL"
	// envKafkaLog=1 prints the adapter's debug log.
	envKafkaLog = "TROUPE_TEST_KAFKA_LOG"
)

// testPartitions is the partition count of every topic the tests create.
const testPartitions = 4

// cluster is the broker a test talks to.
type cluster struct {
	brokers []string
	real    bool
}

// newCluster returns the real broker named by TROUPE_TEST_KAFKA, or starts a kfake
// cluster, with opts, that lives as long as t.
func newCluster(t testing.TB, opts ...kfake.Opt) cluster {
	t.Helper()
	if addr := os.Getenv(envKafka); addr != "" {
		return cluster{brokers: strings.Split(addr, ","), real: true}
	}
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return cluster{brokers: c.ListenAddrs()}
}

func testLogger() watermill.LoggerAdapter {
	if os.Getenv(envKafkaLog) == "1" {
		return watermill.NewStdLogger(true, false)
	}
	return watermill.NopLogger{}
}

func (c cluster) publisherConfig() kafka.PublisherConfig {
	return kafka.PublisherConfig{
		Brokers:      c.brokers,
		Topics:       kafka.TopicLayout{InitializeTopics: true, Default: kafka.TopicConfig{Partitions: testPartitions}},
		CloseTimeout: 20 * time.Second,
	}
}

func (c cluster) subscriberConfig(group string) kafka.SubscriberConfig {
	return kafka.SubscriberConfig{
		Brokers:       c.brokers,
		ConsumerGroup: group,
		Topics:        kafka.TopicLayout{InitializeTopics: true, Default: kafka.TopicConfig{Partitions: testPartitions}},
		// Fast group churn: the suite adds and removes members all the time. The
		// session timeout is the smallest a default broker accepts.
		HeartbeatInterval:      300 * time.Millisecond,
		SessionTimeout:         6 * time.Second,
		RebalanceTimeout:       10 * time.Second,
		JoinGroupBackoff:       200 * time.Millisecond,
		PartitionWatchInterval: time.Second,
		NackResendSleep:        10 * time.Millisecond,
		FetchMaxWait:           200 * time.Millisecond,
		CloseTimeout:           20 * time.Second,
	}
}

func (c cluster) publisher(t testing.TB, mod func(*kafka.PublisherConfig)) *kafka.Publisher {
	t.Helper()
	cfg := c.publisherConfig()
	if mod != nil {
		mod(&cfg)
	}
	pub, err := kafka.NewPublisher(cfg, testLogger())
	if err != nil {
		t.Fatalf("new publisher: %v", err)
	}
	return pub
}

func (c cluster) subscriber(t testing.TB, group string, mod func(*kafka.SubscriberConfig)) *kafka.Subscriber {
	t.Helper()
	cfg := c.subscriberConfig(group)
	if mod != nil {
		mod(&cfg)
	}
	sub, err := kafka.NewSubscriber(cfg, testLogger())
	if err != nil {
		t.Fatalf("new subscriber: %v", err)
	}
	return sub
}

// uniqueName returns prefix and a random suffix, so that runs against one real
// broker never share a topic or a group.
func uniqueName(t testing.TB, prefix string) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random name: %v", err)
	}
	return prefix + hex.EncodeToString(b)
}

// sessionMessage returns a message of session sid.
func sessionMessage(sid, payload string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	msg.Metadata.Set("session_id", sid)
	return msg
}

// receive returns the next message or fails the test after timeout.
func receive(t testing.TB, ch <-chan *message.Message, timeout time.Duration) *message.Message {
	t.Helper()
	select {
	case msg, ok := <-ch:
		if !ok {
			t.Fatal("channel closed")
		}
		return msg
	case <-time.After(timeout):
		t.Fatalf("no message within %s", timeout)
	}
	return nil
}

// noMessage fails the test if a message arrives within d.
func noMessage(t testing.TB, ch <-chan *message.Message, d time.Duration) {
	t.Helper()
	select {
	case msg, ok := <-ch:
		if ok {
			t.Fatalf("unexpected message %s (%q)", msg.UUID, msg.Payload)
		}
	case <-time.After(d):
	}
}

func closeAll(t testing.TB, closers ...interface{ Close() error }) {
	t.Helper()
	for _, c := range closers {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}
}

// testContext is a context for one test with a deadline.
func testContext(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
