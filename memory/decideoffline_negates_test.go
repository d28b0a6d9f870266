package memory_test

import (
	"testing"

	"github.com/troupe-run/troupe/memory"
)

// A fact that holds every word of a stored one and more negations contradicts it
// (DELETE), negations read as the near-duplicate check reads them: the check let
// "Alice eats neither meat nor fish" after "Alice eats meat and fish" through as
// other, and the negation rule, reading a shorter list and only whether one was
// there, saw no negation in it, nor a second one in "Bob doesn't drink coffee and
// doesn't eat meat" after "Bob doesn't drink coffee and eats meat": each replaced
// the stored fact as its "richer version" (UPDATE), which stayed valid.
func TestDecideOfflineReadsNegationsAsTheNearCheckDoes(t *testing.T) {
	for _, tc := range []struct {
		old, fact, event string
	}{
		{"Alice eats meat and fish", "Alice eats neither meat nor fish", memory.EventDelete},
		{"Bob doesn't drink coffee and eats meat", "Bob doesn't drink coffee and doesn't eat meat", memory.EventDelete},
		{"I live in Paris", "I no longer live in Paris", memory.EventDelete},
		{"Alice is not allergic to nuts", "Alice is not allergic to nuts or to shellfish", memory.EventUpdate},
		{"I like cheese", "I like cheese, aged comté above all", memory.EventUpdate},
	} {
		n := memory.Memory{ID: "m_old", Content: tc.old}
		d := memory.DecideOffline(memory.Fact{Content: tc.fact}, []memory.Memory{n})
		if d.Event != tc.event {
			t.Errorf("%q after %q: %s (%s), want %s", tc.fact, tc.old, d.Event, d.Reason, tc.event)
		}
	}
}
