package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A node that stops (Close: a SIGTERM, a rolling restart) does not cancel the
// tasks its RunTask callers wait for, even when their contexts end at the same
// moment (the node's listeners shut, its MCP sessions close): the task stays
// unfinished in the log and the node started again (or the sessions' next owner)
// resumes it. Both ends are ready when RunTaskEach looks (its callback holds it
// until then), each round. A sharded node publishes no task.cancel either, which
// the sessions' next owner would obey.
func TestRunTaskCallerGoneAsTheNodeStopsDoesNotCancel(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		for round := range 5 {
			t.Run(fmt.Sprintf("sharded=%t/%d", sharded, round), func(t *testing.T) { callerGoneAsTheNodeStops(t, sharded) })
		}
	}
}

func callerGoneAsTheNodeStops(t *testing.T, sharded bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	log := sharedLog(t)
	nodes := 0
	start := func(m *heldModel) (*node.Node, func()) {
		cfg := node.Config{Model: m, DataDir: dir, HandoffGrace: 50 * time.Millisecond}
		if !sharded {
			return nodetest.StartWithStop(t, cfg)
		}
		nodes++
		cfg.Log, cfg.NodeID, cfg.DataDir = log, fmt.Sprint("n", nodes), ""
		bus := node.NewEmbeddedBus(watermill.NopLogger{})
		t.Cleanup(func() { _ = bus.Close() })
		cfg.Bus = &node.Bus{Publisher: bus, Tasks: onePartition{bus}, Live: bus, Sharded: true, Partition: func(string, int) int { return 0 }}
		tasks, err := bus.Subscribe(ctx, messages.TopicTasks)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for msg := range tasks {
				if msg.Metadata.Get(messages.MetaType) == string(messages.TypeCancelRequested) {
					t.Errorf("a cancellation was published for session %s", msg.Metadata.Get(messages.MetaSessionID))
				}
				msg.Ack()
			}
		}()
		n, stop := nodetest.StartWithStop(t, cfg)
		n.Assigned([]int{0}, 1)
		return n, stop
	}

	m := &heldModel{asked: make(chan struct{}, 16), release: make(chan struct{})}
	n, stop := start(m)
	caller, leave := context.WithCancel(ctx)
	stopped := make(chan struct{})
	held := false
	each := func(messages.Envelope) {
		if held {
			return
		}
		held = true
		select {
		case <-m.asked:
		case <-ctx.Done():
			t.Error("the model was not asked within 30 s")
			return
		}
		leave()
		go func() {
			defer close(stopped)
			stop()
		}()
		for n.Live() == nil {
			select {
			case <-ctx.Done():
				t.Error("the node did not begin to stop within 30 s")
				return
			case <-time.After(time.Millisecond):
			}
		}
	}
	_, err := n.RunTaskEach(caller, node.Task{Input: "go on after the restart", SessionID: "s-stop"}, each)
	if err == nil || errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopping") {
		t.Errorf("RunTaskEach as the node stops and its caller leaves: %v, want the node's stopping", err)
	}
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("the node did not stop within 30 s")
	}

	// Started again, the node resumes the task: it was not cancelled.
	close(m.release)
	again := &heldModel{asked: make(chan struct{}, 16), release: make(chan struct{})}
	close(again.release)
	n2, stop2 := start(again)
	defer stop2()
	for {
		res, _, err := n2.Status(ctx, "s-stop")
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != messages.StatusRunning {
			if res.Status != messages.StatusCompleted || res.Output != "done" {
				t.Errorf("the task after the restart: %+v, want it resumed and completed (not cancelled)", res)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the task did not end within 30 s of the restart")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
