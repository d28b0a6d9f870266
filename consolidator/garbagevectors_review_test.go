//go:build review

package consolidator_test

import (
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
)

// Design question, not fixed (it is a change of the dedupe rule): an embedder
// that answers one vector for every text (a caching proxy or a broken server
// answering 200 with a constant embedding) gives memories that share no word a
// cosine of 1, and the consolidator merges them all into one: "Eve plays the
// violin" is then no longer found by any search (its text is only in the
// history). Seen live: five unrelated facts written over HTTP while the fake
// embedder answered a constant vector were merged into one within a second
// (threshold run). A guard (dedupe by cosine only of memories that share some
// words, or a floor on the keyword overlap) would keep them apart.
func TestPlanDoesNotMergeMemoriesThatShareNoWordOnAVectorAlone(t *testing.T) {
	a := withVector(mem("a", memory.Semantic, 0.5, 3*24*time.Hour), 1, 0, 0)
	a.Content = "Eve plays the violin"
	b := withVector(mem("b", memory.Semantic, 0.5, 2*24*time.Hour), 1, 0, 0)
	b.Content = "Frank owns a red car"
	got := consolidator.Plan(now, []memory.Memory{a, b}, only(consolidator.Policy{DuplicateThreshold: 0.92}))
	if len(got) != 0 {
		t.Errorf("two memories that share no word, alike only by their vectors: %+v, want no merge", got)
	}
}
