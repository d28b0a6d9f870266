package kafka_test

import (
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/troupe-run/troupe/kafka"
)

// leaderCluster starts a kfake cluster of three brokers (a real broker cannot have
// its leaders moved by the test) and returns it with a cluster for the helpers.
func leaderCluster(t *testing.T) (*kfake.Cluster, cluster) {
	t.Helper()
	if os.Getenv(envKafka) != "" {
		t.Skip("moves partition leaders, which only kfake lets a test do")
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(kc.Close)
	return kc, cluster{brokers: kc.ListenAddrs()}
}

// moveLeaders makes another broker the leader of every partition of topic; the
// old leaders refuse the partition's requests (NOT_LEADER_OR_FOLLOWER), as a real
// broker does once a reassignment took its replica away.
func moveLeaders(t *testing.T, kc *kfake.Cluster, topic string) {
	t.Helper()
	for p := range int32(testPartitions) {
		next := (kc.LeaderFor(topic, p) + 1) % 3 // kfake numbers its brokers from 0
		if err := kc.MoveTopicPartition(topic, p, next); err != nil {
			t.Fatalf("move partition %d: %v", p, err)
		}
	}
}

// A subscriber whose partitions' leaders move to other brokers finds the new
// leaders when the old ones refuse its fetches, without waiting for its next
// metadata refresh: here that would be an hour away (MetadataMaxAge), and with
// kafka-go's default of 6 s every partition stalled up to that long after a leader
// election or a reassignment.
func TestSubscriberFollowsMovedLeaders(t *testing.T) {
	kc, c := leaderCluster(t)
	topic := uniqueName(t, "troupe.test.leaders.")
	ctx := testContext(t, time.Minute)
	first := c.publisher(t, nil)
	defer closeAll(t, first)
	sub := c.subscriber(t, "", func(cfg *kafka.SubscriberConfig) { cfg.MetadataMaxAge = time.Hour })
	defer closeAll(t, sub)
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Publish(topic, sessionMessage("s-1", "before")); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, ch, 20*time.Second); string(m.Payload) != "before" {
		t.Fatalf("got %q", m.Payload)
	} else {
		m.Ack()
	}

	moveLeaders(t, kc, topic)
	// A publisher of its own, which learns the new leaders as it starts.
	after := c.publisher(t, nil)
	defer closeAll(t, after)
	for _, sid := range []string{"s-1", "s-2", "s-3", "s-4", "s-5", "s-6"} {
		if err := after.Publish(topic, sessionMessage(sid, "after "+sid)); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	for len(got) < 6 {
		m := receive(t, ch, 20*time.Second)
		got[string(m.Payload)] = true
		m.Ack()
	}
}

// A publisher whose partitions' leaders moved finds the new leaders when the old
// ones refuse its writes, instead of retrying them at the old ones until its
// metadata is refreshed: here an hour away (MetadataMaxAge), so Publish failed
// after its attempts, and with the default of 6 s a leader move could outlast them.
func TestPublisherFollowsMovedLeaders(t *testing.T) {
	kc, c := leaderCluster(t)
	topic := uniqueName(t, "troupe.test.leaders.")
	ctx := testContext(t, time.Minute)
	pub := c.publisher(t, func(cfg *kafka.PublisherConfig) {
		cfg.MetadataMaxAge = time.Hour
		cfg.PublishTimeout = 20 * time.Second
	})
	defer closeAll(t, pub)
	if err := pub.Publish(topic, sessionMessage("s-1", "before")); err != nil {
		t.Fatal(err)
	}
	moveLeaders(t, kc, topic)
	for _, sid := range []string{"s-1", "s-2", "s-3", "s-4", "s-5", "s-6"} {
		if err := pub.Publish(topic, sessionMessage(sid, "after "+sid)); err != nil {
			t.Fatalf("publish after the leaders moved: %v", err)
		}
	}
	sub := c.subscriber(t, "", nil)
	defer closeAll(t, sub)
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for len(got) < 7 {
		m := receive(t, ch, 20*time.Second)
		got[string(m.Payload)] = true
		m.Ack()
	}
}
