package consolidator_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
)

// Two texts that name other people, places or things are two facts: with the
// offline hashing embedder (the node's default) "Alice told us … that her manager
// is Carol from the billing team" and "… is Dave …" have a cosine of 0.94, over a
// floor of about 0 in a tier of unrelated facts, and the newer was merged into the
// older, found by no search. A pair of which each names someone the other does not
// is not merged and goes to the conflict judgement; a name the other text has in
// lower case, or one text naming more than the other, merges as before.
func TestPlanDoesNotMergeFactsThatNameOthers(t *testing.T) {
	pairs := []struct {
		a, b  string
		merge bool
	}{
		{"Alice told us during the onboarding call that her manager is Carol from the billing team",
			"Alice told us during the onboarding call that her manager is Dave from the billing team", false},
		{"Carol told us during the onboarding call that the invoices of the billing team go out every week",
			"Dave told us during the onboarding call that the invoices of the billing team go out every week", false},
		{"Alice told us during the onboarding call that she flies to Lisbon for the conference in spring",
			"Alice told us during the onboarding call that she flies to Porto for the conference in spring", false},
		{"Alice told us during the onboarding call that her manager is Carol from the billing team",
			"Alice told us during the onboarding call that her manager is Carol from the Billing team", true},
		{"Alice told us during the onboarding call that her manager is Carol from the billing team",
			"Alice told us during the onboarding call that her manager is Carol from the billing team in Lisbon", true},
	}
	for _, p := range pairs {
		var mems []memory.Memory
		for i, s := range others {
			m := mem(fmt.Sprintf("o%02d", i), memory.Semantic, 0.5, 10*24*time.Hour)
			m.Content = s
			mems = append(mems, m)
		}
		a := mem("a", memory.Semantic, 0.5, 3*24*time.Hour)
		a.Content = p.a
		b := mem("b", memory.Semantic, 0.5, 2*24*time.Hour)
		b.Content = p.b
		mems = embedded(t, append(mems, a, b))
		got := consolidator.Plan(now, mems, only(consolidator.Policy{DuplicateThreshold: 0.92}))
		merged := false
		for _, d := range got {
			if d.Kind == consolidator.Merge && (d.Into == "a" || d.Into == "b") {
				merged = true
			}
		}
		if merged != p.merge {
			t.Errorf("%q and %q: %v, want merged %v", p.a, p.b, got, p.merge)
		}
		if p.merge {
			continue
		}
		got = consolidator.Plan(now, mems, only(consolidator.Policy{DuplicateThreshold: 0.92, ConflictThreshold: 0.75}))
		judged := false
		for _, d := range got {
			if d.Kind == consolidator.Invalidate && d.Judge && d.IDs[0] == "a" && d.By == "b" {
				judged = true
			}
		}
		if !judged {
			t.Errorf("%q and %q with conflicts judged: %v, want the pair for the model to judge", p.a, p.b, got)
		}
	}
}
