package node

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
)

// unansweredModel answers no call: each waits until its context ends, as a slow
// provider's would, once it said it started.
type unansweredModel struct{ called chan struct{} }

func (unansweredModel) Name() string { return "unanswered" }

func (m unansweredModel) Generate(ctx context.Context, _ llm.Request) (llm.Response, error) {
	select {
	case m.called <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return llm.Response{}, ctx.Err()
}

// TestHandedOverTaskIsNoLongerRunningHere: a node whose partitions are revoked
// while a task of one of their sessions runs hands the session over, and the
// partitions' next owner runs the task to its end. troupe_tasks_running on the
// node that gave it up stayed at 1 for good (its end is appended on the other
// node), so that a cluster that rebalanced under load showed, summed over its
// nodes, tasks running that had all ended. Once its sessions are handed over, the
// node runs none of their tasks; one whose partition comes back is counted again
// as its session folds.
func TestHandedOverTaskIsNoLongerRunningHere(t *testing.T) {
	ctx := context.Background()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	model := unansweredModel{called: make(chan struct{}, 1)}
	bus := NewEmbeddedBus(watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	n, err := New(ctx, Config{Log: log, NodeID: "a", Model: model, HandoffGrace: 50 * time.Millisecond,
		Bus: &Bus{Publisher: bus, Tasks: partitionZero{bus}, Live: bus, Sharded: true, Partition: func(string, int) int { return 0 }}})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	n.Assigned([]int{0}, 1)

	env, err := n.ingress.Admit(Task{Input: "hello", SessionID: "moving"})
	if err != nil {
		t.Fatal(err)
	}
	// As handleTask asks.
	if _, err := n.system.Root.RequestFuture(n.host, &actors.SubmitTask{Envelope: env}, 30*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-model.called:
	case <-time.After(30 * time.Second):
		t.Fatal("the task never called its model")
	}
	running := n.metrics.sessions.running.WithLabelValues("default")
	if v := gaugeValue(t, running); v != 1 {
		t.Fatalf("troupe_tasks_running while the task runs: %v, want 1", v)
	}

	n.Revoked()
	if v := gaugeValue(t, running); v != 0 {
		t.Errorf("troupe_tasks_running once the task's session was handed over: %v, want 0", v)
	}

	// The partition comes back: the session folds here again, and its task runs here.
	n.Assigned([]int{0}, 1)
	deadline := time.Now().Add(30 * time.Second)
	for gaugeValue(t, running) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("troupe_tasks_running once the session resumed here: %v, want 1", gaugeValue(t, running))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunningAfterARebalanceThatKeepsAPartition: a rebalance revokes the node's
// partitions and gives one of them back. Only the task of the session handed over
// for good stops counting here; the one whose partition came back is counted
// again, once, as its session folds; the gauge never goes below zero, and the
// next revocation leaves none running.
func TestRunningAfterARebalanceThatKeepsAPartition(t *testing.T) {
	ctx := context.Background()
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	model := unansweredModel{called: make(chan struct{}, 4)}
	bus := NewEmbeddedBus(watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	partition := func(id string, _ int) int {
		if id == "kept" {
			return 0
		}
		return 1
	}
	n, err := New(ctx, Config{Log: log, NodeID: "a", Model: model, HandoffGrace: 50 * time.Millisecond,
		Bus: &Bus{Publisher: bus, Tasks: partitionZero{bus}, Live: bus, Sharded: true, Partition: partition}})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	n.Assigned([]int{0, 1}, 2)
	for _, s := range []string{"kept", "moved"} {
		env, err := n.ingress.Admit(Task{Input: "hello", SessionID: s})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.system.Root.RequestFuture(n.host, &actors.SubmitTask{Envelope: env}, 30*time.Second).Result(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-model.called:
		case <-time.After(30 * time.Second):
			t.Fatalf("the task of %s never called its model", s)
		}
	}
	running := n.metrics.sessions.running.WithLabelValues("default")
	if v := gaugeValue(t, running); v != 2 {
		t.Fatalf("troupe_tasks_running while both tasks run: %v, want 2", v)
	}
	n.Revoked()
	if v := gaugeValue(t, running); v != 0 {
		t.Fatalf("troupe_tasks_running once both sessions were handed over: %v, want 0", v)
	}
	n.Assigned([]int{0}, 2)
	deadline := time.Now().Add(30 * time.Second)
	for gaugeValue(t, running) != 1 {
		if v := gaugeValue(t, running); v < 0 || v > 1 || time.Now().After(deadline) {
			t.Fatalf("troupe_tasks_running once the kept partition came back: %v, want 1", v)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The same partition assigned again while its session runs counts it once.
	n.Assigned([]int{0}, 2)
	time.Sleep(100 * time.Millisecond)
	if v := gaugeValue(t, running); v != 1 {
		t.Fatalf("troupe_tasks_running with the kept partition assigned again: %v, want 1", v)
	}
	n.Revoked()
	if v := gaugeValue(t, running); v != 0 {
		t.Fatalf("troupe_tasks_running once every session was handed over: %v, want 0", v)
	}
}
