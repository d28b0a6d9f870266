package consolidator_test

import (
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
)

// An embedder that answers one vector for every text (a caching proxy or a broken
// server answering 200 with a constant embedding) gives memories that share no word
// a cosine of 1: the consolidator merged them all into one, and "Eve plays the
// violin" was then found by no search (its text only in the history; seen live:
// five unrelated facts written over HTTP merged within a second). The same numbers
// for texts that share no word are no evidence of a duplicate; texts that share a
// word, or vectors merely close, merge as before.
func TestPlanDoesNotMergeMemoriesThatShareNoWordOnAVectorAlone(t *testing.T) {
	a := withVector(mem("a", memory.Semantic, 0.5, 3*24*time.Hour), 1, 0, 0)
	a.Content = "Eve plays the violin"
	b := withVector(mem("b", memory.Semantic, 0.5, 2*24*time.Hour), 1, 0, 0)
	b.Content = "Frank owns a red car"
	got := consolidator.Plan(now, []memory.Memory{a, b}, only(consolidator.Policy{DuplicateThreshold: 0.92}))
	if len(got) != 0 {
		t.Errorf("two memories that share no word, alike only by their vectors: %+v, want no merge", got)
	}
	c := withVector(mem("c", memory.Semantic, 0.5, 24*time.Hour), 1, 0, 0)
	c.Content = "Eve plays the violin well"
	d := withVector(mem("d", memory.Semantic, 0.5, 24*time.Hour), 0.99, 0.1, 0)
	d.Content = "Frank drives a red car"
	got = consolidator.Plan(now, []memory.Memory{a, b, c}, only(consolidator.Policy{DuplicateThreshold: 0.92}))
	if len(got) != 1 || got[0].Kind != consolidator.Merge || len(got[0].IDs) != 1 {
		t.Errorf("a, b and c (c shares words with a, b shares none): %+v, want one merge of a and c", got)
	}
	got = consolidator.Plan(now, []memory.Memory{b, d}, only(consolidator.Policy{DuplicateThreshold: 0.92}))
	if len(got) != 1 || got[0].Kind != consolidator.Merge {
		t.Errorf("close vectors, not the same numbers, of texts that share no word: %+v, want the merge as before", got)
	}
}
