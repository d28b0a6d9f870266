package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// gatedModel answers its first call only once gate closes, and says when that
// call started; its other calls are answered at once.
type gatedModel struct {
	llm.Model
	started chan struct{}
	gate    chan struct{}
	calls   chan struct{} // one token: the first call
}

func (m *gatedModel) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	select {
	case <-m.calls:
		close(m.started)
		select {
		case <-m.gate:
		case <-ctx.Done():
			return llm.Response{}, ctx.Err()
		}
	default:
	}
	return m.Model.Generate(ctx, r)
}

// onePartition is an in-process subscriber whose every message is of partition 0, as
// a sharded node's tasks subscriber must say (node.PartitionReader).
type onePartition struct{ message.Subscriber }

func (onePartition) MessagePartition(*message.Message) (int, bool) { return 0, true }

// shardedNode starts a sharded node on an in-process bus of its own, writing to
// log, with every session in partition 0 of 1. The test plays Kafka: it calls
// Assigned and Revoked itself.
func shardedNode(t *testing.T, log eventlog.Log, name string, model llm.Model) *node.Node {
	t.Helper()
	bus := node.NewEmbeddedBus(watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	n, stop := nodetest.StartWithStop(t, node.Config{
		Log: log, NodeID: name, Model: model,
		Bus: &node.Bus{Publisher: bus, Tasks: onePartition{bus}, Live: bus, Sharded: true, Partition: func(string, int) int { return 0 }},
	})
	t.Cleanup(stop)
	return n
}

// TestAssignedFencesThePreviousOwner: node a runs a session and hangs in a model
// call (as a node stopped past the group's session timeout would); Kafka moves
// the partition to node b, which resumes and finishes the session. When a's model
// answers, a's append is refused with ErrFenced: the log holds b's history only,
// once, and a counts the fenced append.
func TestAssignedFencesThePreviousOwner(t *testing.T) {
	log := sharedLog(t)
	script := func(answer string) llm.Model {
		s, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: answer}}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	gated := &gatedModel{Model: script("from a"), started: make(chan struct{}), gate: make(chan struct{}), calls: make(chan struct{}, 1)}
	gated.calls <- struct{}{}
	a := shardedNode(t, log, "a", gated)
	a.Assigned([]int{0}, 1)
	if _, err := a.Submit(context.Background(), node.Task{Input: "hello", SessionID: "s-1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gated.started:
	case <-time.After(30 * time.Second):
		t.Fatal("node a never called its model")
	}

	// a hangs in the call; the group evicts it and gives partition 0 to b.
	b := shardedNode(t, log, "b", script("from b"))
	b.Assigned([]int{0}, 1)
	waitFor(t, 30*time.Second, "node b finishes the session", func() bool {
		st, ok, err := b.Status(context.Background(), "s-1")
		return err == nil && ok && st.Status == messages.StatusCompleted
	})
	close(gated.gate) // a wakes up
	waitFor(t, 30*time.Second, "node a's append is fenced", func() bool {
		return metric(t, a, "troupe_cluster_fenced_appends_total") >= 1
	})

	events, err := log.Read(context.Background(), "s-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events {
		got = append(got, string(e.Type))
		if e.Type == messages.TypeModelResponded && !strings.Contains(string(e.Payload), "from b") {
			t.Errorf("seq %d holds node a's answer: %s", e.Seq, e.Payload)
		}
	}
	if want := "task.submitted model.requested model.responded task.completed"; strings.Join(got, " ") != want {
		t.Fatalf("the log holds %q, want %q", strings.Join(got, " "), want)
	}
	if ea, eb := metric(t, a, "troupe_cluster_ownership_epoch"), metric(t, b, "troupe_cluster_ownership_epoch"); ea == 0 || eb <= ea {
		t.Fatalf("ownership epochs: a %d, b %d; want b's above a's", ea, eb)
	}
}

// metric reads a counter or gauge of n's metrics.
func metric(t *testing.T, n *node.Node, name string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	n.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return int(f)
			}
		}
	}
	return 0
}

// refusingOwner is a log whose Own fails until open is closed, as a ClickHouse that
// is down would; ownCalls counts the attempts.
type refusingOwner struct {
	eventlog.Log
	fencing  eventlog.Fencing
	open     chan struct{}
	ownCalls atomic.Int32
}

func (r *refusingOwner) Own(ctx context.Context, node string, partitions []int) (uint64, error) {
	r.ownCalls.Add(1)
	select {
	case <-r.open:
		return r.fencing.Own(ctx, node, partitions)
	default:
		return 0, errors.New("log unreachable")
	}
}

func (r *refusingOwner) AppendLeased(ctx context.Context, lease eventlog.Lease, events []messages.Envelope) error {
	return r.fencing.AppendLeased(ctx, lease, events)
}

// TestAssignedWaitsForTheLog: a node whose log cannot record its ownership runs
// none of its partitions' sessions; it keeps trying in the background after
// Assigned returned, runs them once the log answers, and a Revoked meanwhile stops
// the attempts.
func TestAssignedWaitsForTheLog(t *testing.T) {
	log := sharedLog(t)
	refusing := &refusingOwner{Log: log, fencing: log.(eventlog.Fencing), open: make(chan struct{})}
	s, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	n := shardedNode(t, refusing, "a", s)
	n.Assigned([]int{0}, 1) // returns after leaseWait, still trying
	if epoch := metric(t, n, "troupe_cluster_ownership_epoch"); epoch != 0 {
		t.Fatalf("ownership epoch %d while the log refuses Own", epoch)
	}
	n.Revoked() // stops the background attempts, and waits for them
	tried := refusing.ownCalls.Load()
	n.Assigned([]int{0}, 1)
	close(refusing.open)
	waitFor(t, 30*time.Second, "the node takes its partition once the log answers", func() bool {
		return metric(t, n, "troupe_cluster_ownership_epoch") > 0
	})
	if _, err := n.Submit(context.Background(), node.Task{Input: "hello", SessionID: "s-1"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the session completes", func() bool {
		st, ok, err := n.Status(context.Background(), "s-1")
		return err == nil && ok && st.Status == messages.StatusCompleted
	})
	if tried < 2 {
		t.Fatalf("Own was tried %d times before Revoked, want retries", tried)
	}
}

// TestFencingStopsAStaleNodesSessionBeforeItsCalls: node a ran a session, which
// passivated (nothing of it in flight), and then hung past the group's session
// timeout; node b took the partition and runs the session's next task, its model
// call in flight. a, woken, still believing it owns the partition, reads that task
// (as from the bus) before any of its writes was refused: the session starts again
// on a, folds b's history and, before, re-issued b's model call under its key (a
// call billed twice; a tool's side effect made twice). Now the session checks its
// partition's current epoch once it has read its events, finds b's, and stops:
// a performs no call, counts the fenced start, and the log holds b's history only.
func TestFencingStopsAStaleNodesSessionBeforeItsCalls(t *testing.T) {
	log := sharedLog(t)
	counted := &countingModel{} // kafkadeadline_test.go
	bus := node.NewEmbeddedBus(watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	a, stop := nodetest.StartWithStop(t, node.Config{
		Log: log, NodeID: "a", Model: counted, IdleTimeout: 100 * time.Millisecond,
		Bus: &node.Bus{Publisher: bus, Tasks: onePartition{bus}, Live: bus, Sharded: true, Partition: func(string, int) int { return 0 }},
	})
	t.Cleanup(stop)
	a.Assigned([]int{0}, 1)
	if _, err := a.Submit(context.Background(), node.Task{Input: "hello", SessionID: "s-1", TaskID: "t-1"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "node a finishes the session and passivates it", func() bool {
		st, ok, err := a.Status(context.Background(), "s-1")
		return err == nil && ok && st.Status == messages.StatusCompleted && metric(t, a, "troupe_sessions_live") == 0
	})
	before := counted.calls.Load()

	// a hangs; the group gives partition 0 to b, which runs the session's next task.
	bScript, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "from b"}}})
	if err != nil {
		t.Fatal(err)
	}
	gated := &gatedModel{Model: bScript, started: make(chan struct{}), gate: make(chan struct{}), calls: make(chan struct{}, 1)}
	gated.calls <- struct{}{}
	defer close(gated.gate)
	b := shardedNode(t, log, "b", gated)
	b.Assigned([]int{0}, 1)
	task := node.Task{Input: "again", SessionID: "s-1", TaskID: "t-2"}
	if _, err := b.Submit(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gated.started:
	case <-time.After(30 * time.Second):
		t.Fatal("node b never called its model")
	}

	// a wakes and reads the same task.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = a.Submit(ctx, task) // refused or not answered: the task is b's
	}()
	waitFor(t, 30*time.Second, "node a starts the session, or stops it", func() bool {
		return counted.calls.Load() > before || metric(t, a, "troupe_cluster_fenced_appends_total") >= 1
	})
	time.Sleep(200 * time.Millisecond) // a call issued just after the fenced count would show
	if calls := counted.calls.Load() - before; calls > 0 {
		t.Fatalf("node a performed %d model calls of the session b runs now (b's call in flight, under its key)", calls)
	}
}
