package kafka_test

import (
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

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

// A group member whose coordinator's broker dies joins the group again on the new
// coordinator without waiting out its session timeout. Until the controller fences
// the dead broker, FindCoordinator still names it; kafka-go, unable to reach it,
// abandons its member ID (its LeaveGroup cannot be delivered either) and joins as
// a new member, and the new coordinator, which loaded the group with the old
// member, held the rebalance until that member's session expired: every partition
// of the group stood still that long (a node's 10 s), on top of the failover. A
// leave that a coordinator acknowledges and loses is sent again.
func TestGroupRejoinsAtOnceWhenItsCoordinatorDies(t *testing.T) {
	kc, c := leaderCluster(t)
	topic := uniqueName(t, "troupe.test.coordinator.")
	group := uniqueName(t, "g-")
	ctx := testContext(t, 2*time.Minute)
	pub := c.publisher(t, nil)
	defer closeAll(t, pub)
	revoked := make(revocations, 8)
	sub := c.subscriber(t, group, func(cfg *kafka.SubscriberConfig) {
		cfg.SessionTimeout = time.Minute // longer than the wait below: it must not be waited out
		cfg.RebalanceTimeout = time.Minute
		cfg.Rebalance = revoked
	})
	defer closeAll(t, sub)
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(topic, sessionMessage("s-1", "before")); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, ch, 20*time.Second); string(m.Payload) != "before" {
		t.Fatalf("got %q", m.Payload)
	} else {
		m.Ack()
	}
	dead := kc.CoordinatorFor(group)
	host, port, err := net.SplitHostPort(c.brokers[dead])
	if err != nil {
		t.Fatal(err)
	}
	portNum, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	// The first answers after the death still name the dead broker, as a real
	// cluster's do until the broker is fenced.
	stale := 5
	kc.ControlKey(int16(kmsg.FindCoordinator), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if stale == 0 {
			kc.DropControl()
			return nil, nil, false
		}
		stale--
		kc.KeepControl()
		res := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
		res.NodeID, res.Host, res.Port = dead, host, int32(portNum)
		for _, key := range req.(*kmsg.FindCoordinatorRequest).CoordinatorKeys {
			res.Coordinators = append(res.Coordinators, kmsg.FindCoordinatorResponseCoordinator{Key: key, NodeID: dead, Host: host, Port: int32(portNum)})
		}
		return res, nil, true
	})
	// The first leave that reaches a coordinator is acknowledged and not applied,
	// as by a coordinator handing the group over while its broker shuts down.
	kc.ControlKey(int16(kmsg.LeaveGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		res := req.ResponseKind().(*kmsg.LeaveGroupResponse)
		for _, m := range req.(*kmsg.LeaveGroupRequest).Members {
			res.Members = append(res.Members, kmsg.LeaveGroupResponseMember{MemberID: m.MemberID})
		}
		return res, nil, true
	})
	if err := kc.RemoveNode(dead); err != nil {
		t.Fatal(err)
	}
	// The member notices (its next heartbeat fails) before "after" is published,
	// which it must then read in a generation on the new coordinator.
	select {
	case <-revoked:
	case <-ctx.Done():
		t.Fatal("the generation never ended")
	}
	if err := pub.Publish(topic, sessionMessage("s-1", "after")); err != nil {
		t.Fatal(err)
	}
	for {
		m := receive(t, ch, 30*time.Second)
		m.Ack()
		if string(m.Payload) == "after" {
			break
		}
		// "before", again: its offset commit may not have reached the old coordinator.
	}
}

// A Publish while the broker restarts rides the restart out, as before the
// transport was made to read the metadata afresh after a refused write: that
// read goes to the broker, and Publish failed at once while it was down, where
// the cached metadata had answered and the write's attempts waited for the
// broker (the real-broker restart test saw 876 publishes refused at once in a
// few seconds of outage, against 2 before).
func TestPublishRidesOutABrokerRestartAfterARefusedWrite(t *testing.T) {
	if os.Getenv(envKafka) != "" {
		t.Skip("restarts the broker, which only kfake lets a test do")
	}
	topic := uniqueName(t, "troupe.test.restart.")
	first, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(testPartitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	addr := first.ListenAddrs()[0]
	_, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	c := cluster{brokers: []string{addr}}
	pub := c.publisher(t, func(cfg *kafka.PublisherConfig) {
		cfg.PublishTimeout = 10 * time.Second
		cfg.Topics.InitializeTopics = false
	})
	defer closeAll(t, pub)
	if err := pub.Publish(topic, sessionMessage("s-1", "before")); err != nil {
		t.Fatal(err)
	}
	first.Close()
	// A write refused while the broker is down: the transport reads the metadata
	// afresh from then on.
	if err := pub.Publish(topic, sessionMessage("s-1", "down")); err == nil {
		t.Fatal("a publish with the broker down went through")
	}
	restarted := make(chan *kfake.Cluster, 1)
	go func() {
		time.Sleep(time.Second)
		kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(testPartitions, topic))
		if err != nil {
			t.Errorf("restart kfake on port %d: %v", port, err)
		}
		restarted <- kc
	}()
	err = pub.Publish(topic, sessionMessage("s-1", "during the restart"))
	if kc := <-restarted; kc != nil {
		defer kc.Close()
	}
	if err != nil {
		t.Fatalf("a publish during a one-second restart: %v; want it to wait for the broker", err)
	}
}
