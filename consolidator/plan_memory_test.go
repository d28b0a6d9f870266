package consolidator_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
)

// allocated is the bytes f allocates on the heap (all of it, freed or not: an upper
// bound of what it holds at once).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// sameVectors is n memories of tier with one vector, and a few zero vectors.
func sameVectors(n int, tier memory.Tier) []memory.Memory {
	mems := make([]memory.Memory, 0, n+n/100)
	for i := range n {
		m := withVector(mem(fmt.Sprintf("m_%06d", i), tier, 0.5, day), 0.3, -0.1, 0.7, 0.2, 0, 0.5, -0.4, 0.1)
		m.Content = digitless(m.Content)
		mems = append(mems, m)
	}
	for i := range n / 100 {
		mems = append(mems, withVector(mem(fmt.Sprintf("z_%06d", i), tier, 0.5, day), 0, 0, 0, 0, 0, 0, 0, 0))
	}
	return mems
}

// Thousands of identical vectors share every bucket of the hashed search, so that
// every pair of them is a candidate: the plan holds a bounded amount of memory per
// memory all the same, not one per pair. The sizes go up, and a size that fails
// stops the larger ones (which would take gigabytes).
func TestPlanOfIdenticalVectorsHoldsMemoryLinearInTheirNumber(t *testing.T) {
	const perMemory = 4 << 10 // bytes allocated per memory planned, at most
	for _, tc := range []struct {
		name string
		n    int
		tier memory.Tier
		p    consolidator.Policy
		want consolidator.Kind
	}{
		// Duplicates: every memory is merged into the first.
		{"duplicates", 2500, memory.Episodic, only(consolidator.Policy{DuplicateThreshold: 0.92}), consolidator.Merge},
		{"duplicates", 20000, memory.Episodic, only(consolidator.Policy{DuplicateThreshold: 0.92}), consolidator.Merge},
		// Close facts to judge: every pair is one, each older fact judged once.
		{"conflicts", 2500, memory.Semantic, only(consolidator.Policy{ConflictThreshold: 0.75}), consolidator.Invalidate},
	} {
		ok := t.Run(fmt.Sprintf("%s/%d", tc.name, tc.n), func(t *testing.T) {
			mems := sameVectors(tc.n, tc.tier)
			var got []consolidator.Decision
			bytes := allocated(func() { got = consolidator.Plan(now, mems, tc.p) })
			if len(got) == 0 || got[0].Kind != tc.want {
				t.Fatalf("%d decisions (%v first); want %v", len(got), got[:min(len(got), 1)], tc.want)
			}
			t.Logf("%d memories: %d decisions, %d bytes allocated", len(mems), len(got), bytes)
			if bytes > uint64(perMemory*len(mems)) {
				t.Fatalf("planning %d memories with one vector allocated %d MiB, want at most %d KiB per memory",
					len(mems), bytes>>20, perMemory>>10)
			}
		})
		if !ok {
			break
		}
	}
}

// Identical vectors whose texts each hold a number of their own (a broken
// embedder, or long texts truncated alike): no two are duplicates (numbersDiffer),
// and telling so must cost no more per pair than comparing their numbers. Before,
// the number check came last, after vectorSaysNothing tokenized both texts of
// every pair: 2,000 such memories took 14 s and 781 MiB to plan.
func TestPlanOfIdenticalVectorsWithOtherNumbersHoldsMemoryLinearInTheirNumber(t *testing.T) {
	const perMemory = 4 << 10
	const n = 2000
	mems := make([]memory.Memory, 0, n)
	for i := range n {
		m := withVector(mem(fmt.Sprintf("m_%06d", i), memory.Episodic, 0.5, day), 0.3, -0.1, 0.7, 0.2, 0, 0.5, -0.4, 0.1)
		m.Content = fmt.Sprintf("event %d happened", i)
		mems = append(mems, m)
	}
	var got []consolidator.Decision
	bytes := allocated(func() { got = consolidator.Plan(now, mems, only(consolidator.Policy{DuplicateThreshold: 0.92})) })
	for _, d := range got {
		if d.Kind == consolidator.Merge {
			t.Fatalf("merged memories whose numbers differ: %v", d)
		}
	}
	if bytes > uint64(perMemory*len(mems)) {
		t.Fatalf("planning %d memories with one vector and other numbers allocated %d MiB, want at most %d KiB per memory", len(mems), bytes>>20, perMemory>>10)
	}
}
