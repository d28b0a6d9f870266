package actors_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// A host that owns a session refuses others with ErrNotOwner; released, a session
// drains: it waits for its tool call in flight, records the result, issues nothing
// new (the next model call stays requested for the next owner) and only then answers
// Drained.
func TestOwnershipReleaseAndDrain(t *testing.T) {
	release := make(chan struct{})
	tool := funcTool{name: "slow", fn: func(ctx context.Context, c tools.Call) (string, error) {
		select {
		case <-release:
			return "done", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}}
	model := &countingModel{Model: script(t, calls(messages.ToolCall{ID: "a", Name: "slow", Arguments: "{}"}), llm.ScriptStep{Content: "finished"})}
	h := newHarness(t, harnessOpts{model: model, tools: []tools.Tool{tool}})
	root := h.system.Root

	if _, err := root.RequestFuture(h.host, &actors.SetOwnership{Owns: func(id string) bool { return id == "mine" }}, time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "go"})
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID, e.Actor = "t-other", "other", "test"
	res, err := root.RequestFuture(h.host, &actors.SubmitTask{Envelope: e}, time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err, ok := res.(error); !ok || !errors.Is(err, actors.ErrNotOwner) {
		t.Fatalf("a session the host does not own: %v, want ErrNotOwner", res)
	}

	h.submit("mine", "t-1", "go")
	waitUntil(t, "the tool call is in flight", func() bool {
		events, _ := h.log.Read(context.Background(), "mine", 1)
		return len(events) > 0 && events[len(events)-1].Type == messages.TypeToolCallRequested
	})
	res, err = root.RequestFuture(h.host, &actors.ReleaseSessions{}, time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	pids := res.([]*actor.PID)
	if len(pids) != 1 {
		t.Fatalf("released %d sessions, want 1", len(pids))
	}
	drained := futureDone(root.RequestFuture(pids[0], &actors.Drain{}, 10*time.Second))
	time.Sleep(50 * time.Millisecond)
	select {
	case <-drained:
		t.Fatal("drained while the tool call was still in flight")
	default:
	}
	close(release)
	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("drain: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the drain never answered")
	}
	_ = root.StopFuture(pids[0]).Wait()

	events, err := h.log.Read(context.Background(), "mine", 1)
	if err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-1]
	if last.Type != messages.TypeModelRequested {
		t.Fatalf("after the drain the log ends with %s, want the next model call requested (and not issued): %s", last.Type, types(events))
	}
	if n := model.total(); n != 1 {
		t.Fatalf("model called %d times, want 1: the drained session must not issue its next call", n)
	}
	// Released, the host owns nothing: the session is refused until ownership returns.
	res, _ = root.RequestFuture(h.host, &actors.SubmitTask{Envelope: e}, time.Second).Result()
	if err, ok := res.(error); !ok || !errors.Is(err, actors.ErrNotOwner) {
		t.Fatalf("after release: %v, want ErrNotOwner", res)
	}
	// Owned again (this node, or the next owner), the session resumes from the log.
	if _, err := root.RequestFuture(h.host, &actors.SetOwnership{}, time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	root.Send(h.host, &actors.ResumeSession{SessionID: "mine"})
	events = h.wait("mine")
	if got := events[len(events)-1].Type; got != messages.TypeTaskCompleted {
		t.Fatalf("resumed session ended with %s: %s", got, types(events))
	}
	if n := model.total(); n != 2 {
		t.Fatalf("model called %d times in all, want 2", n)
	}
}

// futureDone waits for f in the background and delivers its error. It must be f's
// only waiter: protoactor's Future wakes one waiter (sync.Cond.Signal) when it
// completes, so a second one could wait forever.
func futureDone(f *actor.Future) <-chan error {
	done := make(chan error, 1)
	go func() { done <- f.Wait() }()
	return done
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// refusingStore refuses, once, the first batch that holds an event of type refuse
// (ErrInvalidEvent: the session actor panics, and its supervisor restarts it).
type refusingStore struct {
	actors.EventStore
	refuse  messages.Type
	refused atomic.Bool
}

func (s *refusingStore) Append(ctx context.Context, events []messages.Envelope) error {
	for _, e := range events {
		if e.Type == s.refuse && s.refused.CompareAndSwap(false, true) {
			return fmt.Errorf("%w: refused once by the test", eventlog.ErrInvalidEvent)
		}
	}
	return s.EventStore.Append(ctx, events)
}

// A session that fails while it drains (the log refuses the tool result that came
// in flight) is restarted still draining: its next incarnation, which folds the
// log again, issues nothing (neither the tool call again nor the next model call;
// the next owner does) and answers the Drain.
func TestSessionRestartedWhileDrainingKeepsDraining(t *testing.T) {
	release := make(chan struct{})
	var toolCalls atomic.Int32
	tool := funcTool{name: "slow", fn: func(ctx context.Context, c tools.Call) (string, error) {
		toolCalls.Add(1)
		select {
		case <-release:
			return "done", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}}
	model := &countingModel{Model: script(t, calls(messages.ToolCall{ID: "a", Name: "slow", Arguments: "{}"}), llm.ScriptStep{Content: "finished"})}
	store := &refusingStore{refuse: messages.TypeToolCallCompleted}
	h := newHarness(t, harnessOpts{model: model, tools: []tools.Tool{tool},
		store: func(lg *sqlite.Log) actors.EventStore { store.EventStore = lg; return store }})
	root := h.system.Root
	h.submit("mine", "t-1", "go")
	waitUntil(t, "the tool call is in flight", func() bool {
		events, _ := h.log.Read(context.Background(), "mine", 1)
		return len(events) > 0 && events[len(events)-1].Type == messages.TypeToolCallRequested
	})
	res, err := root.RequestFuture(h.host, &actors.ReleaseSessions{}, time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	pids := res.([]*actor.PID)
	if len(pids) != 1 {
		t.Fatalf("released %d sessions, want 1", len(pids))
	}
	drained := futureDone(root.RequestFuture(pids[0], &actors.Drain{}, 20*time.Second))
	close(release)
	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("drain: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the drain never answered")
	}
	if !store.refused.Load() {
		t.Fatal("the tool result was never refused")
	}
	// Time for a restarted incarnation that forgot the drain to issue its calls.
	time.Sleep(200 * time.Millisecond)
	_ = root.StopFuture(pids[0]).Wait()
	if n := toolCalls.Load(); n != 1 {
		t.Errorf("the tool was called %d times, want 1: a draining session issues nothing", n)
	}
	if n := model.total(); n != 1 {
		t.Errorf("the model was called %d times, want 1: a draining session issues nothing", n)
	}
}
