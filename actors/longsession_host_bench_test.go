package actors

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// readCounter counts the events its store's reads return.
type readCounter struct {
	*sqlite.Log
	events atomic.Int64
}

func (r *readCounter) Read(ctx context.Context, sessionID string, fromSeq uint64) ([]messages.Envelope, error) {
	evs, err := r.Log.Read(ctx, sessionID, fromSeq)
	r.events.Add(int64(len(evs)))
	return evs, err
}

// BenchmarkLongSessionReactivate is one task of a passivated session that ran n
// tasks before, on the embedded node's session host and SQLite log: the session
// actor starts, reads and folds the session's events, then runs the task (the
// offline model). Each iteration starts a new host, as after a passivation (one
// activation before the first passivates the session once: a fold snapshot, the
// log keeping them, is saved then); the events/op it reports are those the
// task's session read from the log.
//
//	go test ./actors -run '^$' -bench BenchmarkLongSessionReactivate -benchmem
func BenchmarkLongSessionReactivate(b *testing.B) {
	ag := benchStepAgent()
	ag.Model = llm.OfflineName
	as := Agents{Default: ag}
	for _, n := range []int{1, 100, 1000, 5000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer lg.Close()
			_, events := longSession(b, as, "long", n, 1024)
			for i := 0; i < len(events); i += 500 {
				if err := lg.Append(context.Background(), events[i:min(i+500, len(events))]); err != nil {
					b.Fatal(err)
				}
			}
			store := &readCounter{Log: lg}
			reg, err := tools.NewRegistry()
			if err != nil {
				b.Fatal(err)
			}
			effects := NewLocalEffects(LocalEffectsConfig{Model: llm.Offline{}, Tools: reg})
			defer effects.Close()
			b.ReportAllocs()
			k := 0
			from := uint64(len(events)) + 1
			activate := func() {
				sys := quietSystem()
				host := sys.Root.Spawn(NewSessionHostProps(SessionDeps{Store: store, Effects: effects, Agent: ag}))
				k++
				id := fmt.Sprintf("again-%d", k)
				submitTask(b, sys, host, "long", id)
				waitTaskEnd(b, lg, "long", id, &from)
				_ = sys.Root.PoisonFuture(host).Wait()
				sys.Shutdown()
			}
			// The history was written to the log directly: one activation first
			// folds it as a session that ran it would have, and passivates.
			activate()
			store.events.Store(0)
			iterations := 0
			for b.Loop() {
				iterations++
				activate()
			}
			b.ReportMetric(float64(store.events.Load())/float64(iterations), "events/op")
		})
	}
}

// waitTaskEnd waits until the log holds the end of task id, reading the session's
// events from *from on, and leaves *from past the events it read: a benchmark
// reads the events of its own task, not the session's whole history again.
func waitTaskEnd(tb testing.TB, lg eventlog.Log, session, id string, from *uint64) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs, err := lg.Read(context.Background(), session, *from)
		if err != nil {
			tb.Fatal(err)
		}
		for _, e := range evs {
			*from = e.Seq + 1
			if e.CorrelationID == id && (e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed) {
				return
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("task %s did not end in 30 s", id)
		}
		time.Sleep(time.Millisecond)
	}
}

// quietSystem returns an actor system that logs nothing.
func quietSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
}

// submitTask submits to host a task of session, of ID id, asking "What is 2 + 2?",
// failing tb when the host does not take it within 30 s.
func submitTask(tb testing.TB, sys *actor.ActorSystem, host *actor.PID, session, id string) {
	tb.Helper()
	e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "What is 2 + 2?"})
	if err != nil {
		tb.Fatal(err)
	}
	e.ID, e.SessionID, e.Actor = id, session, "test"
	if res, err := sys.Root.RequestFuture(host, &SubmitTask{Envelope: e}, 30*time.Second).Result(); err != nil {
		tb.Fatalf("submit: %v %v", res, err)
	}
}

// loggedLongSession returns an agent that answers offline, a log (in a directory
// of the test's, closed at its end) holding the events of a session id of n tasks
// it ran (longSession, each tool result resultBytes long), and those events.
func loggedLongSession(t *testing.T, id string, n, resultBytes int) (Agent, *sqlite.Log, []messages.Envelope) {
	t.Helper()
	ag := benchStepAgent()
	ag.Model = llm.OfflineName
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	_, events := longSession(t, Agents{Default: ag}, id, n, resultBytes)
	for i := 0; i < len(events); i += 500 {
		if err := lg.Append(context.Background(), events[i:min(i+500, len(events))]); err != nil {
			t.Fatal(err)
		}
	}
	return ag, lg, events
}
