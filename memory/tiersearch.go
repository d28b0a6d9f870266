package memory

import (
	"context"
	"slices"

	pmem "github.com/troupe-run/troupe/pipelines/memory"
)

// TierSearch is a Search split by tier, for callers that rank each tier on its own
// (the namespace actor's tier actors, actors/memory.go): PrepareSearch checks the
// query, folds the namespace and embeds the query once; Tier ranks one tier by its
// formula; Results merges the tiers' lists by score. Run in that order, it answers
// what Search answers.
type TierSearch struct {
	s     *search
	tiers []Tier
}

// PrepareSearch starts a search of q (see Search).
func (ns *Namespace) PrepareSearch(ctx context.Context, q Query) (*TierSearch, error) {
	s, err := ns.startSearch(ctx, q)
	if err != nil {
		return nil, err
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if err := ns.prepareSearch(ctx, s); err != nil {
		return nil, err
	}
	return &TierSearch{s: s, tiers: slices.Compact(slices.Clone(s.q.Tiers))}, nil
}

// Tiers returns the tiers the search covers.
func (ts *TierSearch) Tiers() []Tier { return slices.Clone(ts.tiers) }

// Tier ranks tier t's candidates. Calls for different tiers may run at once: each
// holds the namespace while it reads it.
func (ts *TierSearch) Tier(ctx context.Context, t Tier) ([]pmem.Ranked, error) {
	ns := ts.s.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ts.s.tier(ctx, t)
}

// Results merges the tiers' ranked lists into the search's results, best first.
// A memory forgotten since its tier was ranked is left out.
func (ts *TierSearch) Results(lists ...[]pmem.Ranked) []Result {
	ns := ts.s.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ts.s.results(lists...)
}

// Note says what the search ranked without the vector store (see SearchNoted), once
// its tiers are ranked.
func (ts *TierSearch) Note() string {
	ns := ts.s.ns
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ts.s.note()
}
