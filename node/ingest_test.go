package node_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// gatedLog is an event log whose appends for one session wait until the test opens
// the gate: a session busy recording its task, for as long as the test wants.
type gatedLog struct {
	eventlog.Log
	session string
	held    chan struct{} // closed when an append of the session first waits
	open    chan struct{} // closed by the test
	once    sync.Once
}

func newGatedLog(t *testing.T, session string) *gatedLog {
	g := &gatedLog{Log: sharedLog(t), session: session, held: make(chan struct{}), open: make(chan struct{})}
	t.Cleanup(g.release)
	return g
}

func (g *gatedLog) release() {
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *gatedLog) Append(ctx context.Context, events []messages.Envelope) error {
	for _, e := range events {
		if e.SessionID != g.session {
			continue
		}
		g.once.Do(func() { close(g.held) })
		select {
		case <-g.open:
		case <-ctx.Done():
			return ctx.Err()
		}
		break
	}
	return g.Log.Append(ctx, events)
}

// ingestBus runs a node for an ingest test, on the embedded bus or on Kafka.
type ingestBus struct {
	name string
	// start runs a node on log; partitions is the partition count of troupe.tasks
	// (0 on the embedded bus).
	start      func(t *testing.T, log eventlog.Log) *node.Node
	partitions int
}

func ingestBuses() []ingestBus {
	return []ingestBus{
		{name: "embedded", start: func(t *testing.T, log eventlog.Log) *node.Node {
			return nodetest.Start(t, node.Config{Log: log})
		}},
		{name: "kafka", partitions: 6, start: func(t *testing.T, log eventlog.Log) *node.Node {
			// Sharded, as node serve --kafka: DialNode's group has
			// kafka.NodeTasksInFlight tasks in flight per partition.
			n, _ := clusterNode(t, newKafkaEnv(t), uniqueGroup(t), log, "n1", 0, nil, nil)
			return n
		}},
	}
}

// publishTask publishes a plain JSON task for session on the node's bus, with id as
// its message ID (and so the ID of its task.submitted event).
func publishTask(t *testing.T, n *node.Node, id, session, input string) {
	t.Helper()
	msg := message.NewMessage(id, []byte(fmt.Sprintf(`{"input":%q,"session_id":%q}`, input, session)))
	msg.Metadata.Set(messages.MetaSessionID, session)
	if err := n.Publisher().Publish(messages.TopicTasks, msg); err != nil {
		t.Fatalf("publish task %s: %v", id, err)
	}
}

// submitted returns the IDs of a session's task.submitted events, in log order.
func submitted(t *testing.T, log eventlog.Log, session string) []string {
	t.Helper()
	events, err := log.Read(context.Background(), session, 1)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range events {
		if e.Type == messages.TypeTaskSubmitted {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// TestSessionTasksArriveInOrder publishes many tasks of one session through the bus
// as fast as it takes them, interleaved with tasks of other sessions, while the
// session is still recording its first task (its log appends wait), so that the node
// has them all in hand at once: the other sessions record theirs meanwhile, and the
// session records its tasks in the order they were published.
func TestSessionTasksArriveInOrder(t *testing.T) {
	for _, bus := range ingestBuses() {
		t.Run(bus.name, func(t *testing.T) {
			log := newGatedLog(t, "ordered")
			n := bus.start(t, log)
			const tasks, others = 40, 40
			want := []string{"ordered-00"}
			publishTask(t, n, want[0], "ordered", "echo 0")
			select {
			case <-log.held:
			case <-time.After(30 * time.Second):
				t.Fatal("the session never started recording its first task")
			}
			for i := 1; i < tasks; i++ {
				id := fmt.Sprintf("ordered-%02d", i)
				publishTask(t, n, id, "ordered", fmt.Sprintf("echo %d", i))
				want = append(want, id)
				publishTask(t, n, fmt.Sprintf("other-%02d-task", i), fmt.Sprintf("other-%02d", i%others), "echo other")
			}
			for i := 1; i < tasks; i++ {
				s := fmt.Sprintf("other-%02d", i%others)
				waitFor(t, 30*time.Second, "session "+s+"'s task recorded", func() bool { return len(submitted(t, log, s)) == 1 })
			}
			log.release()
			deadline := time.Now().Add(time.Minute)
			for {
				got := submitted(t, log, "ordered")
				if len(got) == tasks {
					if !slices.Equal(got, want) {
						t.Fatalf("the session recorded its tasks in another order than they were published:\ngot  %v\nwant %v", got, want)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the session recorded %d of %d tasks within a minute: %v", len(got), tasks, got)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestSessionsIngestConcurrently: while one session takes its time to record a task
// (its log appends wait), the next task of that session waits for it, and a task of
// another session (on Kafka, on the same partition) is recorded meanwhile.
func TestSessionsIngestConcurrently(t *testing.T) {
	for _, bus := range ingestBuses() {
		t.Run(bus.name, func(t *testing.T) {
			log := newGatedLog(t, "slow")
			n := bus.start(t, log)
			fast := "fast"
			if bus.partitions > 0 {
				for i := 0; kafka.PartitionOf(fast, bus.partitions) != kafka.PartitionOf("slow", bus.partitions); i++ {
					fast = fmt.Sprintf("fast-%d", i)
				}
			}
			publishTask(t, n, "slow-1", "slow", "echo first")
			select {
			case <-log.held:
			case <-time.After(30 * time.Second):
				t.Fatal("the slow session never started recording its task")
			}
			publishTask(t, n, "slow-2", "slow", "echo second")
			publishTask(t, n, "fast-1", fast, "echo fast")
			waitFor(t, 30*time.Second, "the other session's task recorded while the slow session records its own",
				func() bool { return len(submitted(t, log, fast)) == 1 })
			if got := submitted(t, log, "slow"); len(got) != 0 {
				t.Fatalf("the slow session recorded %v while its first append waited", got)
			}
			log.release()
			waitFor(t, 30*time.Second, "both tasks of the slow session recorded", func() bool { return len(submitted(t, log, "slow")) == 2 })
			if got := submitted(t, log, "slow"); !slices.Equal(got, []string{"slow-1", "slow-2"}) {
				t.Fatalf("the slow session recorded %v, want slow-1 then slow-2", got)
			}
		})
	}
}
