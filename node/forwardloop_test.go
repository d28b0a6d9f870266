package node_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// lateOwner tells a node set after the subscriber was made about its partitions
// (the node subscribes as it starts, before the test has it).
type lateOwner struct {
	mu      sync.Mutex
	n       *node.Node
	pending *kafka.Assignment
}

func (o *lateOwner) set(n *node.Node) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n = n
	if a := o.pending; a != nil {
		n.Assigned(a.Partitions, a.Total)
	}
}

func (o *lateOwner) Assigned(a kafka.Assignment) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.pending = &a
		return
	}
	o.n.Assigned(a.Partitions, a.Total)
}

func (o *lateOwner) Revoked(kafka.Assignment) {
	o.mu.Lock()
	n := o.n
	o.pending = nil
	o.mu.Unlock()
	if n != nil {
		n.Revoked()
	}
}

// Partitions added to troupe.tasks reach producers (within their metadata's age)
// and the consumer group (at its next partition check, and the rebalance that
// follows) at different times. Meanwhile a task that a producer placed by the new
// count lands on a partition its node's assignment (by the old count) says is not
// its session's: the node forwards it. The forward must go to the partition the node
// computed: left to the publisher's own count, the copy lands where it was read
// again, and the node forwards it again, thousands of times a second, until both
// counts agree, reordering the session's tasks (tasks published later overtake the
// one going round).
//
// Here the group never sees the new partitions (its check is an hour apart): the
// task must still run, on the node that owns its session's partition by the count
// it was assigned.
func TestForwardGoesToThePartitionTheNodeComputed(t *testing.T) {
	k := newKafkaEnv(t)
	log := sharedLog(t)
	group := uniqueGroup(t)
	owner := &lateOwner{}
	tasks, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: k.brokers, ConsumerGroup: group, Topics: k.layout(6), Rebalance: owner,
		MaxInFlight: kafka.NodeTasksInFlight, PartitionWatchInterval: time.Hour}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tasks.Close() })
	// A producer that reads the topic's metadata again at once (as every producer
	// does within its metadata's age).
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: k.brokers, Topics: k.layout(6), MetadataMaxAge: time.Millisecond}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	calls := &modelCalls{by: map[string]int{}}
	led := newLedger(log, 0)
	n, _ := clusterNode(t, k, group, log, "a", 0, nil, calls.model(t, log, "a"), func(cfg *node.Config) {
		cfg.Tools = append(cfg.Tools, led.tool("a"))
		cfg.Bus.Tasks, cfg.Bus.Publisher = tasks, pub
	})
	owner.set(n)
	waitFor(t, 60*time.Second, "node a owns every partition", func() bool { return n.PartitionsOwned() == 6 })

	client := &kgo.Client{Addr: kgo.TCP(k.brokers...), Timeout: 10 * time.Second}
	res, err := client.CreatePartitions(context.Background(), &kgo.CreatePartitionsRequest{
		Topics: []kgo.TopicPartitionsConfig{{Name: k.topic(messages.TopicTasks), Count: 9}},
	})
	if err == nil {
		err = res.Errors[k.topic(messages.TopicTasks)]
	}
	if err != nil {
		t.Fatalf("add partitions: %v", err)
	}
	// A session whose partition by the new count is one the node reads, and not its
	// partition by the count the node was assigned.
	var session string
	for i := 0; session == ""; i++ {
		s := fmt.Sprintf("grown-%d-%d", time.Now().UnixNano(), i)
		if p := kafka.PartitionOf(s, 9); p < 6 && p != kafka.PartitionOf(s, 6) {
			session = s
		}
	}
	// The producer knows the new count once its metadata was read again.
	time.Sleep(50 * time.Millisecond)
	if _, err := n.Submit(context.Background(), node.Task{Input: "pay 7", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, n, []string{session}, 15*time.Second)
}
