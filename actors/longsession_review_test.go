//go:build review

package actors

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// Review repro (fails today): re-activating a passivated session reads and folds
// every event of its history (SessionActor.load reads from seq 1), so each task of
// a session of n tasks that passivated since its last costs O(n): 8,016 events read
// for the next task of a session of 1,000 tasks. With a fold snapshot (a derived,
// versioned cache of the state at some seq, checked against the event at that seq)
// it would read the events after the snapshot only.
//
//	go test -tags review ./actors -run TestReactivationReadsOnlyTheTail -count=1
func TestReactivationReadsOnlyTheTail(t *testing.T) {
	ag := benchStepAgent()
	ag.Model = llm.OfflineName
	as := Agents{Default: ag}
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	_, events := longSession(t, as, "long", 1000, 256)
	for i := 0; i < len(events); i += 500 {
		if err := lg.Append(context.Background(), events[i:min(i+500, len(events))]); err != nil {
			t.Fatal(err)
		}
	}
	store := &readCounter{Log: lg}
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	effects := NewLocalEffects(LocalEffectsConfig{Model: llm.Offline{}, Tools: reg})
	defer effects.Close()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	host := sys.Root.Spawn(NewSessionHostProps(SessionDeps{Store: store, Effects: effects, Agent: ag}))
	e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "What is 2 + 2?"})
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID, e.Actor = "again", "long", "test"
	if res, err := sys.Root.RequestFuture(host, &SubmitTask{Envelope: e}, 30*time.Second).Result(); err != nil {
		t.Fatalf("submit: %v %v", res, err)
	}
	from := uint64(len(events)) + 1
	waitTaskEnd(t, lg, "long", e.ID, &from)
	if n := store.events.Load(); n > 256 {
		t.Fatalf("the next task of a passivated session of 1,000 tasks (%d events) read %d events from the log", len(events), n)
	}
}
