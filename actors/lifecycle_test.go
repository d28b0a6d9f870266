package actors_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// downStore is a log that is down for one session: every append of it fails, as a
// full disk or an unreachable server does, until up is called. The first failing
// attempt writes the batch nonetheless (writeFirst), as a write whose answer was lost
// does; reads fail while readsFail is set, with readErr (a corrupt store if nil:
// an error no retry mends).
type downStore struct {
	actors.EventStore
	session    string
	writeFirst bool
	readsFail  bool
	readErr    error
	reads      int // the session's reads that failed
	mu         sync.Mutex
	down       bool
	attempts   int
	failing    chan struct{} // closed on the first failed append
}

func (s *downStore) Append(ctx context.Context, events []messages.Envelope) error {
	s.mu.Lock()
	down := s.down && len(events) > 0 && events[0].SessionID == s.session
	first := false
	if down {
		s.attempts++
		first = s.attempts == 1
	}
	s.mu.Unlock()
	if !down {
		return s.EventStore.Append(ctx, events)
	}
	if first {
		if s.writeFirst {
			if err := s.EventStore.Append(ctx, events); err != nil {
				return err
			}
		}
		close(s.failing)
	}
	return errors.New("the log is unreachable")
}

func (s *downStore) Read(ctx context.Context, id string, from uint64) ([]messages.Envelope, error) {
	s.mu.Lock()
	fail := s.readsFail && id == s.session
	err := s.readErr
	if fail {
		s.reads++
	}
	s.mu.Unlock()
	if fail {
		if err == nil {
			err = fmt.Errorf("%w: the log cannot be read", messages.ErrCorrupt)
		}
		return nil, err
	}
	return s.EventStore.Read(ctx, id, from)
}

func (s *downStore) up() {
	s.mu.Lock()
	s.down = false
	s.mu.Unlock()
}

func taskEnvelope(t *testing.T, session, id string) messages.Envelope {
	t.Helper()
	e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "go"})
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID, e.Actor = id, session, "test"
	return e
}

// A session whose log is down retries its write for as long as it takes; when its
// node stops it (its partitions revoked: release, drain, stop), it must stop now,
// not once the log is back: the task it was writing and the requests queued behind
// it (a task, one submitted with Done, a cancellation) are answered at once with
// ErrNotOwner, retryable, while the log is still down. The task whose write may
// have landed (its answer was lost) is found by its ID when it is submitted again:
// it is in the log once, and accepted as a duplicate.
func TestStoppingASessionEndsItsRetriedWrite(t *testing.T) {
	store := &downStore{session: "s", down: true, writeFirst: true, failing: make(chan struct{})}
	h := newHarness(t, harnessOpts{
		model: script(t, llm.ScriptStep{Content: "done"}),
		store: func(lg *sqlite.Log) actors.EventStore { store.EventStore = lg; return store },
	})
	root := h.system.Root
	// The futures' timeouts stand for the node handlers' (SubmitTimeout).
	first := futureResult(root.RequestFuture(h.host, &actors.SubmitTask{Envelope: taskEnvelope(t, "s", "t-1")}, 30*time.Second))
	select {
	case <-store.failing:
	case <-time.After(10 * time.Second):
		t.Fatal("the session never wrote its task")
	}
	queued := futureResult(root.RequestFuture(h.host, &actors.SubmitTask{Envelope: taskEnvelope(t, "s", "t-2")}, 30*time.Second))
	done := make(chan error, 1)
	root.Send(h.host, &actors.SubmitTask{Envelope: taskEnvelope(t, "s", "t-3"), Done: done})
	cancel := futureResult(root.RequestFuture(h.host, &actors.CancelTask{SessionID: "s"}, 30*time.Second))

	// As Revoked does: release, drain (the Drain waits behind the write), stop.
	res, err := root.RequestFuture(h.host, &actors.ReleaseSessions{}, 10*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	pids := res.([]*actor.PID)
	if len(pids) != 1 {
		t.Fatalf("released %d sessions, want 1", len(pids))
	}
	drained := futureResult(root.RequestFuture(pids[0], &actors.Drain{}, 30*time.Second))
	root.Stop(pids[0])

	for what, r := range map[string]<-chan futureAnswer{"the task being written": first, "a queued task": queued, "a queued cancellation": cancel} {
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
	case <-time.After(30 * time.Second):
		t.Error("a queued task submitted with Done got no answer")
	}
	if a := <-drained; a.err != nil {
		t.Errorf("the Drain got no answer: %v", a.err)
	}

	// The log is back; the session runs here again, and the tasks are retried.
	store.up()
	if _, err := root.RequestFuture(h.host, &actors.SetOwnership{}, 10*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	if acc := h.submit("s", "t-1", "go"); !acc.Duplicate {
		t.Errorf("the retried task whose write landed was accepted as %+v; want a duplicate", acc)
	}
	h.submit("s", "t-2", "go")
	events := h.wait("s")
	assertGapFree(t, events)
	tasks := map[string]int{}
	for _, e := range events {
		if e.Type == messages.TypeTaskSubmitted {
			tasks[e.ID]++
		}
	}
	if tasks["t-1"] != 1 || tasks["t-2"] != 1 {
		t.Errorf("tasks in the log: %v; want t-1 and t-2 once each", tasks)
	}
}

// A session that fails on every start (its log holds what cannot be read: a
// corrupt store, which no retry mends) is restarted by its host, then given up
// after repeated failures. The task it failed on, and the
// requests left in its mailbox, are answered ErrSessionFailed with the cause, not
// ErrNotOwner (the node does own the session), nor left to their timeouts. The next
// task, once the log reads again, starts the session anew.
func TestASessionGivenUpAnswersErrSessionFailed(t *testing.T) {
	store := &downStore{session: "s"}
	h := newHarness(t, harnessOpts{
		model: script(t, llm.ScriptStep{Content: "done"}, llm.ScriptStep{Content: "done"}),
		store: func(lg *sqlite.Log) actors.EventStore { store.EventStore = lg; return store },
	})
	root := h.system.Root
	// A task recorded first, so that the session has events to read when it starts
	// again (the host reads a session it ran before it submits a task).
	h.submit("s", "t-0", "go")
	h.wait("s")
	if err := root.PoisonFuture(h.host).Wait(); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	store.readsFail = true
	store.mu.Unlock()
	h.host = root.Spawn(actors.NewSessionHostProps(actors.SessionDeps{Store: store, Effects: h.effects,
		Agent: actors.Agent{Model: "scripted", SystemPrompt: "test"}}))
	t.Cleanup(func() { _ = root.PoisonFuture(h.host).Wait() })

	// A session host started with the session's events in the log reads them as the
	// session starts: it fails, is restarted, and fails again.
	root.Send(h.host, &actors.ResumeSession{SessionID: "s"})
	submitted := futureResult(root.RequestFuture(h.host, &actors.SubmitTask{Envelope: taskEnvelope(t, "s", "t-1")}, 30*time.Second))
	done := make(chan error, 1)
	root.Send(h.host, &actors.SubmitTask{Envelope: taskEnvelope(t, "s", "t-2"), Done: done})
	cancel := futureResult(root.RequestFuture(h.host, &actors.CancelTask{SessionID: "s"}, 30*time.Second))

	check := func(what string, err error) {
		t.Helper()
		switch {
		case !errors.Is(err, actors.ErrSessionFailed):
			t.Errorf("%s was answered %v; want ErrSessionFailed", what, err)
		case errors.Is(err, actors.ErrNotOwner):
			t.Errorf("%s was answered %v, which says the node does not own the session", what, err)
		case !strings.Contains(err.Error(), "the log cannot be read"):
			t.Errorf("%s was answered %v, without the cause", what, err)
		}
	}
	for what, r := range map[string]<-chan futureAnswer{"a task": submitted, "a cancellation": cancel} {
		select {
		case a := <-r:
			if a.err != nil {
				t.Errorf("%s got no answer: %v; want ErrSessionFailed", what, a.err)
				continue
			}
			err, _ := a.res.(error)
			check(what, err)
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: the future hung", what)
		}
	}
	select {
	case err := <-done:
		check("a task submitted with Done", err)
	case <-time.After(30 * time.Second):
		t.Error("a task submitted with Done got no answer")
	}

	// The log reads again: the next task starts the session anew.
	store.mu.Lock()
	store.readsFail = false
	store.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := root.RequestFuture(h.host, &actors.SubmitTask{Envelope: taskEnvelope(t, "s", "t-3")}, 10*time.Second).Result()
		if _, ok := res.(*actors.TaskAccepted); ok && err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session never took a task again: %v %v", res, err)
		}
		time.Sleep(20 * time.Millisecond) // the given-up actor's stop reaches its host
	}
}
