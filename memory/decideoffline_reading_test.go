package memory_test

import (
	"testing"

	"github.com/troupe-run/troupe/memory"
)

// The offline write decision reads a fact's numbers and negations as the
// consolidator's dedupe does. It read the runs of digits sorted, so that a
// corrected date ("2026-03-05" for "2026-05-03", "3/5" for "5/3") was a near
// duplicate (NONE) and lost; it read no number written in words ("four children"
// for "three children": lost), and it asked only whether a text held a negation
// from a short English list, so that "Bob doesn't drink coffee and doesn't eat
// meat" after "Bob doesn't drink coffee and eats meat", and "neither … nor", were
// lost too. A fact that says the same in other words ("21" for "twenty-one", "5"
// for "05", "is not" for "isn't") is still a near duplicate.
func TestDecideOfflineReadsNumbersAndNegationsAsDedupeDoes(t *testing.T) {
	for _, tc := range []struct {
		old, fact string
		none      bool
	}{
		{"Alice's flight to Rome is on 2026-05-03", "Alice's flight to Rome is on 2026-03-05", false},
		{"Alice's flight to Rome is on 5/3", "Alice's flight to Rome is on 3/5", false},
		{"Alice has three children", "Alice has four children", false},
		{"Bob doesn't drink coffee and eats meat", "Bob doesn't drink coffee and doesn't eat meat", false},
		{"Alice eats meat and fish", "Alice eats neither meat nor fish", false},
		{"Alice's daughter turns twenty-one in June", "Alice's daughter turns 21 in June", true},
		{"Alice's flight to Rome is on May 05", "Alice's flight to Rome is on May 5", true},
		{"Alice isn't allergic to peanuts", "Alice is not allergic to peanuts", true},
	} {
		// One vector for both: only the texts tell them apart.
		n := memory.Memory{ID: "m_old", Content: tc.old, Vector: []float32{1, 0}}
		d := memory.DecideOffline(memory.Fact{Content: tc.fact, Vector: []float32{1, 0}}, []memory.Memory{n})
		if (d.Event == memory.EventNone) != tc.none {
			t.Errorf("%q after %q: %s (%s), want NONE %v", tc.fact, tc.old, d.Event, d.Reason, tc.none)
		}
	}
}
