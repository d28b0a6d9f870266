package actors

import (
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/tools"
)

// Re-activating a passivated session reads the events after its fold snapshot
// only (a derived, versioned cache of the state at some seq, checked against the
// event at that seq, saved as the session passivated), not its whole history:
// without it each task of a session of n tasks that passivated since its last
// cost O(n), 8,016 events read for the next task of a session of 1,000 tasks.
//
//	go test ./actors -run TestReactivationReadsOnlyTheTail -count=1
func TestReactivationReadsOnlyTheTail(t *testing.T) {
	ag, lg, events := loggedLongSession(t, "long", 1000, 256)
	store := &readCounter{Log: lg}
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	effects := NewLocalEffects(LocalEffectsConfig{Model: llm.Offline{}, Tools: reg})
	defer effects.Close()
	sys := quietSystem()
	defer sys.Shutdown()
	from := uint64(len(events)) + 1
	// The first activation reads the whole history (nothing folded it before:
	// the events were written to the log directly) and, passivated, saves a fold
	// snapshot; the next reads the events after it.
	for round, want := range []string{"whole", "tail"} {
		store.events.Store(0)
		host := sys.Root.Spawn(NewSessionHostProps(SessionDeps{Store: store, Effects: effects, Agent: ag}))
		id := fmt.Sprintf("again-%d", round)
		submitTask(t, sys, host, "long", id)
		waitTaskEnd(t, lg, "long", id, &from)
		if err := sys.Root.PoisonFuture(host).Wait(); err != nil { // the sessions passivate
			t.Fatal(err)
		}
		n := store.events.Load()
		if want == "whole" && n < int64(len(events)) {
			t.Fatalf("the first activation read %d events, want the whole history (%d)", n, len(events))
		}
		if want == "tail" && n > 256 {
			t.Fatalf("the next task of a passivated session of 1,000 tasks (%d events) read %d events from the log", len(events), n)
		}
	}
}
