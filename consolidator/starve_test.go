package consolidator_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
)

// workBudget is a context whose deadline is a quantity of work rather than a time:
// it expires once its Err has been asked budget times. The planner asks its context
// once per few thousand comparisons, so it stands for a run's timeout that the
// pairwise rules of a large namespace use up, the same on every machine.
type workBudget struct {
	context.Context
	mu     sync.Mutex
	budget int
	done   chan struct{}
}

func newWorkBudget(budget int) *workBudget {
	return &workBudget{Context: context.Background(), budget: budget, done: make(chan struct{})}
}

func (w *workBudget) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.budget == 0 {
		return context.DeadlineExceeded
	}
	if w.budget--; w.budget == 0 {
		close(w.done)
	}
	return nil
}

func (w *workBudget) Done() <-chan struct{} { return w.done }

// denseEpisodes is n episodic memories whose vectors are all alike (pairwise cosines
// about 0.85, under the duplicate threshold): templated memories ("user N asked
// about topic T"), where every pair must be compared and planning is slow.
func denseEpisodes(n int) []memory.Memory {
	const dim = 64
	r := rand.New(rand.NewPCG(7, 7))
	base := make([]float64, dim)
	for i := range base {
		base[i] = r.NormFloat64()
	}
	out := make([]memory.Memory, n)
	for i := range out {
		v := make([]float32, dim)
		var s float64
		for d := range v {
			x := base[d] + 0.42*r.NormFloat64()
			v[d] = float32(x)
			s += x * x
		}
		for d := range v {
			v[d] /= float32(math.Sqrt(s))
		}
		m := withVector(mem(fmt.Sprintf("e%05d", i), memory.Episodic, 0.5, time.Hour), v...)
		m.Content, m.Hash = digitless(m.Content), fmt.Sprintf("h%d", i)
		out[i] = m
	}
	return out
}

// A run whose timeout the pairwise rules (dedupe, clusters) of a large namespace
// use up still forgets the old unimportant memories: forgetting by age needs no
// comparison of pairs, and a namespace too large to dedupe within a run must not
// also grow for ever. Before, a run planned every rule before applying any, and a
// namespace of 100,000 memories was never planned within the 5 minutes of a run:
// nothing was ever forgotten.
func TestRunCutShortWhilePlanningPairsStillForgetsTheOld(t *testing.T) {
	mems := append(denseEpisodes(1500),
		mem("old1", memory.Episodic, 0.1, 40*day),
		mem("old2", memory.Working, 0.05, 3*day),
		mem("kept", memory.Episodic, 0.9, 400*day)) // important: never forgotten by age
	f := newFake(mems...)
	c := newConsolidator(t, nil, consolidator.Policy{})

	// The whole plan asks its context hundreds of times; forgetting alone a few.
	ctx := newWorkBudget(50)
	rep, err := c.Run(ctx, f, "run1")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the run ended with %v, want its budget used up by the pairwise rules (report %+v)", err, rep)
	}
	if rep.Forgotten != 2 {
		t.Errorf("the run forgot %d memories, want old1 and old2: %s", rep.Forgotten, rep)
	}
	for _, id := range []string{"old1", "old2"} {
		if _, ok := f.get(id); ok {
			t.Errorf("%s is still there", id)
		}
	}
	if _, ok := f.get("kept"); !ok {
		t.Error("the important memory was forgotten")
	}

	// The next run, with time enough, forgets nothing twice and does the rest.
	rep, err = c.Run(context.Background(), f, "run2")
	if err != nil || rep.Forgotten != 0 || f.dups != 0 {
		t.Errorf("the next run: err %v, forgot %d, %d changes repeated", err, rep.Forgotten, f.dups)
	}
}

// A run over a namespace of 20,000 memories of one template (their vectors all
// alike: they share their hash buckets by the thousand) plans within a budget of
// work linear in their number and applies what it decided: before, its pairwise
// rules compared every pair of a bucket, and at 100,000 memories a run's 5 minutes
// ran out before a single merge was applied, run after run.
func TestRunOfAlikeMemoriesFinishesWithinItsBudget(t *testing.T) {
	const n = 20_000
	mems := denseEpisodes(n)
	// Every tenth memory repeats the one before in other words (cosine 0.999).
	for i := 9; i < n; i += 10 {
		v := slices.Clone(mems[i-1].Vector)
		v[i%len(v)] += 0.01
		mems[i].Vector = v
	}
	f := newFake(mems...)
	c := newConsolidator(t, nil, consolidator.Policy{})
	// The planner asks its context once per 4,096 steps of work (a memory looked
	// at as a candidate, mostly); a budget of n/2 asks is 2,048 steps per memory.
	ctx := newWorkBudget(n / 2)
	rep, err := c.Run(ctx, f, "run1")
	if err != nil {
		t.Fatalf("the run ended with %v (%d asks left of %d); want it planned and applied", err, ctx.budget, n/2)
	}
	t.Logf("%d memories alike: %d asks of the budget's %d; merged %d, distilled %d, %d decisions", n, n/2-ctx.budget, n/2,
		rep.Merged, rep.Distilled, len(rep.Decisions))
	if rep.Merged < n/10 {
		t.Errorf("the run merged %d memories, want the %d repeated at least", rep.Merged, n/10)
	}
	if len(f.mems) > n-n/10 {
		t.Errorf("%d memories left of %d: the merges were not applied", len(f.mems), n)
	}
}
