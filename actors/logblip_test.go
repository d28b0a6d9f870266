package actors_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// blip is a log outage as a session starts: its next left calls fail, as an
// unreachable ClickHouse does, then they succeed; calls counts them all.
type blip struct {
	mu    sync.Mutex
	left  int
	calls int
}

func (b *blip) call() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	if b.left > 0 {
		b.left--
		return errors.New("dial tcp 127.0.0.1:9000: connect: connection refused")
	}
	return nil
}

func (b *blip) arm(n int) {
	b.mu.Lock()
	b.left = n
	b.mu.Unlock()
}

func (b *blip) count() (calls, left int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls, b.left
}

// blipReads is a store whose reads of one session go through a blip (reads set).
type blipReads struct {
	actors.EventStore
	session string
	reads   *blip
}

func (s *blipReads) Read(ctx context.Context, id string, from uint64) ([]messages.Envelope, error) {
	if s.reads != nil && id == s.session {
		if err := s.reads.call(); err != nil {
			return nil, err
		}
	}
	return s.EventStore.Read(ctx, id, from)
}

// restartHost stops h's host and starts another on the same store, with the
// session's activation checked by stillOwned (none if nil): the session, which has
// events, reads them as its actor starts (the host did not run it).
func restartHost(t *testing.T, h *harness, store actors.EventStore, stillOwned func(context.Context, string) error) {
	t.Helper()
	root := h.system.Root
	if err := root.PoisonFuture(h.host).Wait(); err != nil {
		t.Fatal(err)
	}
	h.host = root.Spawn(actors.NewSessionHostProps(actors.SessionDeps{Store: store, Configs: h.log, Effects: h.effects,
		Agent: actors.Agent{Model: "scripted", SystemPrompt: "test"}, StillOwned: stillOwned}))
	t.Cleanup(func() { _ = root.PoisonFuture(h.host).Wait() })
}

// A session whose log cannot be read for a while as it starts (ClickHouse
// blipped: its events' read, or the check that its node still owns its partition,
// SessionDeps.StillOwned, fails more times in a row than its supervisor restarts
// it) waits for the log and goes on: it is not given up, the tasks queued behind
// its start are all accepted and run, once each. Before, each failure panicked the
// actor; after 5 in 10 s its supervisor gave it up and the tasks were answered
// ErrSessionFailed.
func TestASessionWaitsOutALogBlipAsItStarts(t *testing.T) {
	const failures = 6 // more than the supervisor's 5 restarts
	for _, fault := range []string{"read", "epoch"} {
		t.Run(fault, func(t *testing.T) {
			var b blip
			store := &blipReads{session: "s"}
			if fault == "read" {
				store.reads = &b
			}
			var stillOwned func(context.Context, string) error
			if fault == "epoch" {
				stillOwned = func(context.Context, string) error { return b.call() }
			}
			h := newHarness(t, harnessOpts{
				model: script(t, llm.ScriptStep{Content: "done"}, llm.ScriptStep{Content: "done"}, llm.ScriptStep{Content: "done"}),
				store: func(lg *sqlite.Log) actors.EventStore { store.EventStore = lg; return store },
			})
			h.submit("s", "t-0", "go")
			h.wait("s")
			b.arm(failures)
			restartHost(t, h, store, stillOwned)

			root := h.system.Root
			first := futureResult(root.RequestFuture(h.host, &actors.SubmitTask{Envelope: taskEnvelope(t, "s", "t-1")}, 60*time.Second))
			done := make(chan error, 1)
			root.Send(h.host, &actors.SubmitTask{Envelope: taskEnvelope(t, "s", "t-2"), Done: done})
			select {
			case a := <-first:
				if acc, ok := a.res.(*actors.TaskAccepted); a.err != nil || !ok || acc.Duplicate {
					t.Fatalf("the task queued behind the blip was answered %v, %v; want it accepted", a.res, a.err)
				}
			case <-time.After(90 * time.Second):
				t.Fatal("the task queued behind the blip got no answer")
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("the second task queued behind the blip was answered %v; want it accepted", err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("the second task queued behind the blip got no answer")
			}
			var events []messages.Envelope
			eventually(t, 30*time.Second, "both tasks end", func() bool {
				events, _ = h.log.Read(context.Background(), "s", 1)
				n := 0
				for _, e := range events {
					if e.Type == messages.TypeTaskCompleted {
						n++
					}
				}
				return n == 3
			})
			assertGapFree(t, events)
			tasks := map[string]int{}
			for _, e := range events {
				if e.Type == messages.TypeTaskSubmitted {
					tasks[e.ID]++
				}
			}
			if tasks["t-0"] != 1 || tasks["t-1"] != 1 || tasks["t-2"] != 1 {
				t.Errorf("tasks in the log: %v; want t-0, t-1 and t-2 once each", tasks)
			}
			if calls, left := b.count(); left != 0 || calls < failures+1 {
				t.Errorf("the %s was tried %d times (%d failures left); want the %d failures, then a success", fault, calls, left, failures)
			}
		})
	}
}

// A session waiting for its log as it starts (the check that its node still
// owns its partition keeps failing) stops when its node stops it (its partitions
// revoked: release, drain, stop), without waiting for the log: the task it was
// starting for and the requests queued behind it are answered ErrNotOwner, which
// the node retries where the session runs next, not ErrSessionFailed; the session
// never ran unchecked. Once the log answers again, the task runs.
func TestStoppingASessionEndsItsWaitForTheLog(t *testing.T) {
	var b blip
	store := &blipReads{session: "s"}
	h := newHarness(t, harnessOpts{
		model: script(t, llm.ScriptStep{Content: "done"}, llm.ScriptStep{Content: "done"}),
		store: func(lg *sqlite.Log) actors.EventStore { store.EventStore = lg; return store },
	})
	h.submit("s", "t-0", "go")
	h.wait("s")
	b.arm(1 << 30)
	restartHost(t, h, store, func(context.Context, string) error { return b.call() })

	root := h.system.Root
	first := futureResult(root.RequestFuture(h.host, &actors.SubmitTask{Envelope: taskEnvelope(t, "s", "t-1")}, 30*time.Second))
	cancel := futureResult(root.RequestFuture(h.host, &actors.CancelTask{SessionID: "s"}, 30*time.Second))
	eventually(t, 30*time.Second, "the session retries its check", func() bool { calls, _ := b.count(); return calls >= 3 })

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
	for what, r := range map[string]<-chan futureAnswer{"the task the session started for": first, "a queued cancellation": cancel} {
		select {
		case a := <-r:
			if err, ok := a.res.(error); a.err != nil || !ok || !errors.Is(err, actors.ErrNotOwner) || errors.Is(err, actors.ErrSessionFailed) {
				t.Errorf("%s was answered %v, %v; want ErrNotOwner", what, a.res, a.err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: the future hung", what)
		}
	}
	if a := <-drained; a.err != nil {
		t.Errorf("the Drain got no answer: %v", a.err)
	}
	before, err := h.log.Read(context.Background(), "s", 1)
	if err != nil || len(before) == 0 || before[len(before)-1].Type != messages.TypeTaskCompleted {
		t.Fatalf("the log holds %s (%v); want t-0's events only", types(before), err)
	}

	// The log answers again; the session runs here again, and the task is retried.
	b.arm(0)
	if _, err := root.RequestFuture(h.host, &actors.SetOwnership{}, 10*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	if acc := h.submit("s", "t-1", "go"); acc.Duplicate {
		t.Errorf("the retried task was accepted as %+v; want it recorded now", acc)
	}
	events := h.wait("s")
	assertGapFree(t, events)
	if len(events) <= len(before) {
		t.Errorf("the log holds %s; want t-1 run after t-0", types(events))
	}
}

// eventually waits until cond holds, and fails the test when it does not within d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
