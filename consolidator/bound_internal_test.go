package consolidator

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/troupe-run/troupe/memory"
)

// alike is n episodic memories of one template: vectors all alike (pairwise cosines
// about 0.85: under the duplicate threshold, over the cluster one), every tenth a
// duplicate of the one before (cosine about 0.99).
func alike(n int) []memory.Memory {
	const dim = 64
	r := rand.New(rand.NewPCG(7, 7))
	base := make([]float64, dim)
	for i := range base {
		base[i] = r.NormFloat64()
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	out := make([]memory.Memory, n)
	var prev []float64
	for i := range out {
		x := make([]float64, dim)
		for d := range x {
			if i%10 == 9 {
				x[d] = prev[d] + 0.05*r.NormFloat64()
			} else {
				x[d] = base[d] + 0.42*r.NormFloat64()
			}
		}
		prev = x
		var s float64
		for _, f := range x {
			s += f * f
		}
		v := make([]float32, dim)
		for d := range v {
			v[d] = float32(x[d] / math.Sqrt(s))
		}
		out[i] = memory.Memory{ID: fmt.Sprintf("e%06d", i), Tier: memory.Episodic, Modality: memory.Text, Importance: 0.5,
			Timestamp: at.Add(time.Duration(i) * time.Second), Hash: fmt.Sprintf("h%d", i), Vector: v}
	}
	return out
}

// The pairwise rules of a namespace of 20,000 memories of one template (which share
// their buckets by the thousand) compare a bounded number of pairs per memory, not
// every pair of a bucket: before, a run of 100,000 such memories planned for more
// than its 5 minutes and never applied a merge. The plan still merges the
// duplicates and proposes clusters.
func TestPlanOfAlikeMemoriesComparesABoundedNumberOfPairs(t *testing.T) {
	const n = 20_000
	mems := alike(n)
	// Each hashed search (dedupe, clusters) compares at most maxCompared pairs per
	// memory; the whole set's pairs are 200 million.
	const bound = 2 * maxCompared * n
	pl := newPlanner(context.Background(), time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), mems, DefaultPolicy().withDefaults())
	// The plan stops at its next check once past the bound: without it, it takes
	// minutes.
	pl.ctx = comparisons{Context: context.Background(), pl: pl, bound: bound}
	for _, rule := range []func(){pl.forgetOld, pl.dedupe, pl.promote, pl.capacity, pl.conflicts, pl.clusters} {
		rule()
	}
	if pl.err != nil {
		t.Fatalf("%d memories alike: %d pairs compared (%v), want at most %d", n, pl.compared, pl.err, bound)
	}
	kinds := map[Kind]int{}
	merged := map[string]string{}
	for _, d := range pl.out {
		kinds[d.Kind]++
		for _, id := range d.IDs {
			if d.Kind == Merge {
				merged[id] = d.Into
			}
		}
	}
	planted := 0 // e…9 is a duplicate of e…8
	for i := 9; i < n; i += 10 {
		a, b := mems[i-1].ID, mems[i].ID
		if merged[a] != "" || merged[b] != "" { // not both kept
			planted++
		}
	}
	t.Logf("%d memories alike: %d pairs compared; decisions %v; %d of %d planted duplicates merged", n, pl.compared, kinds, planted, n/10)
	if planted < n/10*95/100 || kinds[Distill] == 0 {
		t.Errorf("decisions by kind %v, %d of %d planted duplicates merged: want 95%% of them, and clusters proposed", kinds, planted, n/10)
	}
}

// comparisons is a context that is done once its planner compared more than bound pairs.
type comparisons struct {
	context.Context
	pl    *planner
	bound int
}

func (c comparisons) Err() error {
	if c.pl.compared > c.bound {
		return fmt.Errorf("more than %d pairs compared: %w", c.bound, context.DeadlineExceeded)
	}
	return nil
}

// A threshold too low for the hash tables to find 99% of its pairs (0.5) made the
// searches of a large set compare every pair; they are hashed all the same, with the
// same bound per memory.
func TestSearchAtALowThresholdComparesABoundedNumberOfPairs(t *testing.T) {
	const n, s = 10_000, 0.5
	if tables, _ := tablesFor(s); tables != 0 {
		t.Fatalf("threshold %v: %d tables; the test wants one too low for them", s, tables)
	}
	const bound = maxCompared * n
	pl := newPlanner(context.Background(), time.Now(), alike(n), DefaultPolicy())
	pl.ctx = comparisons{Context: context.Background(), pl: pl, bound: bound}
	ns := pl.near(pl.items, s)
	found := 0
	for i := range pl.items {
		ns.each(i, i+1, func(int) bool { return false }, func(int, float64) { found++ })
	}
	if pl.err != nil {
		t.Fatalf("%d memories alike: %d pairs compared (%v), want at most %d", n, pl.compared, pl.err, bound)
	}
	if found < n {
		t.Errorf("%d pairs found among %d memories alike", found, n)
	}
	t.Logf("%d memories alike: %d pairs compared, %d found", n, pl.compared, found)
}
