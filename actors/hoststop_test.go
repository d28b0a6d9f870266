package actors_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// fencedStore is a log whose first append waits until release is closed and is then
// refused with ErrFenced, as when another node took the session's partition while
// this one hung.
type fencedStore struct {
	actors.EventStore
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (s *fencedStore) Append(ctx context.Context, events []messages.Envelope) error {
	fenced := false
	s.once.Do(func() {
		close(s.entered)
		<-s.release
		fenced = true
	})
	if fenced {
		return fmt.Errorf("%w: another node owns the partition", eventlog.ErrFenced)
	}
	return s.EventStore.Append(ctx, events)
}

// A session whose append is fenced stops itself; the requests the host forwarded
// it meanwhile (a task, one submitted with Done, a cancellation), queued behind the
// append, are answered ErrNotOwner when it stops, not left to their timeouts.
func TestStoppedSessionAnswersItsQueuedRequests(t *testing.T) {
	store := &fencedStore{entered: make(chan struct{}), release: make(chan struct{})}
	h := newHarness(t, harnessOpts{
		model: script(t, llm.ScriptStep{Content: "done"}),
		store: func(lg *sqlite.Log) actors.EventStore { store.EventStore = lg; return store },
	})
	released := false
	t.Cleanup(func() {
		if !released {
			close(store.release)
		}
	})
	root := h.system.Root
	task := func(id string) messages.Envelope {
		e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "go"})
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Actor = id, "s", "test"
		return e
	}
	// The futures' timeouts stand for the node handlers' (SubmitTimeout).
	first := futureResult(root.RequestFuture(h.host, &actors.SubmitTask{Envelope: task("t-1")}, 20*time.Second))
	select {
	case <-store.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the session never appended its task")
	}
	queued := futureResult(root.RequestFuture(h.host, &actors.SubmitTask{Envelope: task("t-2")}, 20*time.Second))
	done := make(chan error, 1)
	root.Send(h.host, &actors.SubmitTask{Envelope: task("t-3"), Done: done})
	cancel := futureResult(root.RequestFuture(h.host, &actors.CancelTask{SessionID: "s"}, 20*time.Second))
	// The host forwarded them (it answers in order) before the append fails.
	if _, err := root.RequestFuture(h.host, &actors.CountSessions{}, 10*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	released = true
	close(store.release)

	for what, r := range map[string]<-chan futureAnswer{"the fenced task": first, "a queued task": queued, "a queued cancellation": cancel} {
		select {
		case a := <-r:
			if a.err != nil {
				t.Errorf("%s got no answer: %v; want ErrNotOwner", what, a.err)
			} else if err, ok := a.res.(error); !ok || !errors.Is(err, actors.ErrNotOwner) {
				t.Errorf("%s was answered %v; want ErrNotOwner", what, a.res)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: the future hung", what)
		}
	}
	select {
	case err := <-done:
		if !errors.Is(err, actors.ErrNotOwner) {
			t.Errorf("a queued task submitted with Done was answered %v; want ErrNotOwner", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("a queued task submitted with Done got no answer")
	}
}

type futureAnswer struct {
	res any
	err error
}

// futureResult waits for f in the background and delivers what it resolved to.
func futureResult(f interface{ Result() (any, error) }) <-chan futureAnswer {
	out := make(chan futureAnswer, 1)
	go func() {
		res, err := f.Result()
		out <- futureAnswer{res, err}
	}()
	return out
}

// A task submitted with Done that the host forwards to a session actor that
// stopped on its own (it failed, and its supervisor gave up on it) before the host
// saw it stop reaches the dead letters, which answer only a request with a sender:
// the submitter waited for its SubmitTimeout. The host answers it ErrNotOwner, which
// the node retries.
func TestDeadLetteredTaskIsAnswered(t *testing.T) {
	h := newHarness(t, harnessOpts{model: script(t, llm.ScriptStep{Content: "done"})})
	e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "go"})
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID, e.Actor = "t-1", "s", "test"
	if _, err := h.system.Root.RequestFuture(h.host, &actors.CountSessions{}, 10*time.Second).Result(); err != nil {
		t.Fatal(err) // the host started
	}
	done := make(chan error, 1)
	// A session actor's PID that no process holds any more.
	h.system.Root.Send(h.system.NewLocalPID("gone-session"), &actors.SubmitTask{Envelope: e, Done: done})
	select {
	case err := <-done:
		if !errors.Is(err, actors.ErrNotOwner) {
			t.Errorf("a dead-lettered task was answered %v; want ErrNotOwner", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a dead-lettered task submitted with Done got no answer")
	}
}

// holdingStore is a log whose first append waits until release is closed (its
// context ignored, as a hung disk would), then goes through.
type holdingStore struct {
	actors.EventStore
	held    atomic.Bool // not a sync.Once: the appends after the first go through meanwhile
	entered chan struct{}
	release chan struct{}
}

func (s *holdingStore) Append(ctx context.Context, events []messages.Envelope) error {
	if s.held.CompareAndSwap(false, true) {
		close(s.entered)
		<-s.release
	}
	return s.EventStore.Append(ctx, events)
}

// A task for a session not running that reaches the host while it stops
// (protoactor hands a stopping actor the user messages of its mailbox while it
// waits for its children) is answered ErrNotOwner, not run: before, the host
// spawned its session, which the stop never reached, and the host never stopped
// (a node's Close waited its StopTimeout out, then closed the log under it).
func TestStoppingHostStartsNoSession(t *testing.T) {
	store := &holdingStore{entered: make(chan struct{}), release: make(chan struct{})}
	h := newHarness(t, harnessOpts{
		model: script(t, slices.Repeat([]llm.ScriptStep{{Content: "done"}}, 8)...),
		store: func(lg *sqlite.Log) actors.EventStore { store.EventStore = lg; return store },
	})
	released := false
	t.Cleanup(func() {
		if !released {
			close(store.release)
		}
	})
	root := h.system.Root
	task := func(session, id string) messages.Envelope {
		e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "go"})
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Actor = id, session, "test"
		return e
	}
	root.Send(h.host, &actors.SubmitTask{Envelope: task("held", "t-0")})
	select {
	case <-store.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the session never appended its task")
	}
	// Tasks for new sessions before the stop run (their sessions then stop with
	// the host), while the held session's append waits.
	for i := range 2 {
		res, err := root.RequestFuture(h.host, &actors.SubmitTask{Envelope: task(fmt.Sprintf("early-%d", i), fmt.Sprintf("t-early-%d", i))}, 10*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err, ok := res.(error); ok {
			t.Fatalf("a task before the stop was answered %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- actors.AwaitStop(ctx, h.system, h.host, root.Poison) }()
	refused := false
	for i := 0; i < 200 && !refused; i++ {
		res, err := root.RequestFuture(h.host, &actors.SubmitTask{Envelope: task(fmt.Sprintf("late-%d", i), fmt.Sprintf("t-late-%d", i))}, 10*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err, ok := res.(error); ok {
			if !errors.Is(err, actors.ErrNotOwner) {
				t.Fatalf("a task for a new session while the host stops was answered %v; want ErrNotOwner", err)
			}
			refused = true
		}
	}
	released = true
	close(store.release)
	if err := <-stopped; err != nil {
		t.Fatalf("the host did not stop: %v", err)
	}
	if !refused {
		t.Fatal("no task was refused while the host stopped")
	}
}
