package node_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// eventsSubscriber counts a node's subscriptions to messages.TopicEvents.
type eventsSubscriber struct {
	message.Subscriber
	count atomic.Int64
}

func (s *eventsSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if topic == messages.TopicEvents {
		s.count.Add(1)
	}
	return s.Subscriber.Subscribe(ctx, topic)
}

// TestClusterWatchersLocalAndRemote runs tasks on a two-node cluster. Nodes nobody
// watches through do not read troupe.events back. Then every session is watched on
// both nodes before its task is submitted: on its owner the session actor feeds the
// watcher, on the other node the bus does; each watcher gets every event of the
// task, from seq 1, in seq order, once.
func TestClusterWatchersLocalAndRemote(t *testing.T) {
	k := newKafkaEnv(t)
	log := sharedLog(t)
	group := uniqueGroup(t)
	var nodes []*node.Node
	var subs []*eventsSubscriber
	for i := range 2 {
		clients, err := kafka.DialNode(k.brokers, group, k.layout(forwardPartitions), watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		live := &eventsSubscriber{Subscriber: clients.Live}
		n, err := node.New(context.Background(), node.Config{Log: log, NodeID: fmt.Sprintf("w%d", i),
			Bus: &node.Bus{Publisher: clients.Publisher, Tasks: clients.Group, Live: live, Sharded: true, Partition: kafka.PartitionOf}})
		if err != nil {
			_ = clients.Close()
			t.Fatal(err)
		}
		clients.SetOwner(n)
		stop, err := n.Start(context.Background())
		if err != nil {
			_ = clients.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { stop(); _ = clients.Close() })
		nodes, subs = append(nodes, n), append(subs, live)
	}
	waitFor(t, 60*time.Second, "every node owning partitions", func() bool {
		total := 0
		for _, n := range nodes {
			if n.PartitionsOwned() == 0 {
				return false
			}
			total += n.PartitionsOwned()
		}
		return total == forwardPartitions
	})

	// Unwatched: nobody reads troupe.events.
	var quiet []string
	for i := range 6 {
		id := fmt.Sprintf("quiet-%d", i)
		if _, err := nodes[i%2].Submit(context.Background(), node.Task{Input: "echo " + id, SessionID: id}); err != nil {
			t.Fatal(err)
		}
		quiet = append(quiet, id)
	}
	waitCompleted(t, nodes[0], quiet, 60*time.Second)
	for i, s := range subs {
		if c := s.count.Load(); c != 0 {
			t.Errorf("node %d subscribed to %s %d times without a watcher", i, messages.TopicEvents, c)
		}
	}

	// Watched on both nodes: each session is local on one, remote on the other.
	type watch struct {
		node, session string
		live          <-chan messages.Envelope
	}
	var watches []watch
	var sessions []string
	for i := range 12 {
		id := fmt.Sprintf("watched-%d", i)
		sessions = append(sessions, id)
		for j, n := range nodes {
			live, stop := n.Watch(id)
			t.Cleanup(stop)
			watches = append(watches, watch{fmt.Sprintf("w%d", j), id, live})
		}
	}
	for i, id := range sessions {
		if _, err := nodes[i%2].Submit(context.Background(), node.Task{Input: "echo " + id, SessionID: id}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, w := range watches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			timeout := time.After(60 * time.Second)
			var want uint64 = 1
			for {
				select {
				case e, ok := <-w.live:
					if !ok {
						t.Errorf("%s watching %s: the feed closed at seq %d", w.node, w.session, want)
						return
					}
					if e.Seq != want {
						t.Errorf("%s watching %s: seq %d (%s), want %d", w.node, w.session, e.Seq, e.Type, want)
						return
					}
					want++
					if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
						return
					}
				case <-timeout:
					t.Errorf("%s watching %s: no end of the task within 60 s (next seq %d)", w.node, w.session, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, s := range subs {
		if c := s.count.Load(); c != 1 {
			t.Errorf("node %d subscribed to %s %d times for its remote watchers, want 1", i, messages.TopicEvents, c)
		}
	}
}
