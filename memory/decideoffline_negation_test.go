package memory_test

import (
	"context"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
)

// A fact that negates a stored one, or gives it another number, is no near
// duplicate of it however close the vectors: with the offline hashing embedder
// "Alice told us during the onboarding call that she is not allergic to peanuts
// and shellfish" has a cosine of 0.95 with "… she is allergic …", and the write
// after a task without a model dropped it as "near duplicate" (NONE) before it
// looked for a negation: the correction was lost. So was a new phone number
// ("555-0102" for "555-0101", cosine 0.96). The negation invalidates the stored
// fact; the other number is a fact of its own.
func TestDecideOfflineKeepsANegationOrAnotherNumberOfANearFact(t *testing.T) {
	for _, tc := range []struct {
		old, fact string
		event     string
	}{
		{"Alice told us during the onboarding call that she is allergic to peanuts and shellfish",
			"Alice told us during the onboarding call that she is not allergic to peanuts and shellfish", memory.EventDelete},
		{"Alice's phone number is 555-0101 according to the form she filled in at the front desk",
			"Alice's phone number is 555-0102 according to the form she filled in at the front desk", memory.EventAdd},
		{"Alice said on the phone that she lives near the river with her family",
			"Alice said on the phone that she lives near the river with her family!", memory.EventNone},
	} {
		vs, err := llm.HashingEmbedder{}.Embed(context.Background(), []string{tc.old, tc.fact})
		if err != nil {
			t.Fatal(err)
		}
		n := memory.Memory{ID: "m_old", Content: tc.old, Vector: vs[0]}
		d := memory.DecideOffline(memory.Fact{Content: tc.fact, Vector: vs[1]}, []memory.Memory{n})
		if d.Event != tc.event {
			t.Errorf("%q after %q: %s (%s), want %s", tc.fact, tc.old, d.Event, d.Reason, tc.event)
		}
	}
}
