package memory_test

import (
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/memory"
)

// Memories a search leaves out (invalidated facts, kept as history; ones below the
// importance asked for) do not crowd out of its vector candidates the ones it
// keeps: a search by vector finds the current fact however many invalidated ones
// are closer to the query.
func TestSearchByVectorIsNotCrowdedOutByInvalidMemories(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	ns := f.ns(t, "user:alice")
	var reqs []memory.AddRequest
	for i := range 8 {
		reqs = append(reqs, memory.AddRequest{Tier: memory.Semantic, Content: fmt.Sprintf("Alice lives in the old city flat number %d", i+1)})
	}
	reqs = append(reqs, memory.AddRequest{Tier: memory.Semantic, Content: "Alice lives in Porto"})
	res, err := ns.Add(ctx, "k1", reqs)
	if err != nil {
		t.Fatal(err)
	}
	current := res[len(res)-1].ID
	for i, r := range res[:len(res)-1] {
		if err := ns.Invalidate(ctx, fmt.Sprintf("inv%d", i), r.ID, current, "moved"); err != nil {
			t.Fatal(err)
		}
	}
	for _, mode := range []string{memory.ModeVector, memory.ModeHybrid} {
		got, err := ns.Search(ctx, memory.Query{Text: "Alice lives in the old city flat", Limit: 1, Mode: mode, Tiers: []memory.Tier{memory.Semantic}})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Memory.ID != current {
			t.Errorf("%s: found %v, want the current fact %s", mode, got, current)
		}
	}
}
