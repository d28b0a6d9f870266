package consolidator_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/consolidator"
)

// doneAfter is a context whose Err turns context.Canceled at its n-th call: a run
// that reaches its timeout while it plans, without a clock.
type doneAfter struct {
	context.Context
	mu    sync.Mutex
	n     int
	calls int
}

func (c *doneAfter) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if c.calls >= c.n {
		return context.Canceled
	}
	return nil
}

func TestPlanContextDoneBeforePlanningPlansNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, err := consolidator.PlanContext(ctx, now, namespaceOf(3000, 1), consolidator.Policy{})
	if !errors.Is(err, context.Canceled) || got != nil {
		t.Fatalf("PlanContext with a cancelled context = %d decisions, %v; want none, context.Canceled", len(got), err)
	}
}

// A run abandoned at its timeout while planning a large namespace stops planning at
// the next check (every few thousand comparisons): PlanContext returns the context's
// error and checks it no more.
func TestPlanContextStopsWhenItsContextIsDoneWhilePlanning(t *testing.T) {
	mems := namespaceOf(3000, 1)
	for _, at := range []int{3, 10, 40} {
		ctx := &doneAfter{Context: context.Background(), n: at}
		got, err := consolidator.PlanContext(ctx, now, mems, consolidator.Policy{})
		if !errors.Is(err, context.Canceled) || got != nil {
			t.Fatalf("context done at check %d: PlanContext = %d decisions, %v; want none, context.Canceled", at, len(got), err)
		}
		if ctx.calls != at {
			t.Errorf("context done at check %d: checked %d times; want it to stop at once", at, ctx.calls)
		}
	}
	// The same plan with a context that stays live is Plan's.
	mems = mems[:500]
	got, err := consolidator.PlanContext(context.Background(), now, mems, consolidator.Policy{})
	if err != nil || len(got) == 0 || !reflect.DeepEqual(got, consolidator.Plan(now, mems, consolidator.Policy{})) {
		t.Fatalf("PlanContext with a live context: %v, or decisions unlike Plan's", err)
	}
}

// The run's context ends while it plans (its timeout): the run applies nothing and
// says why.
func TestRunAbandonedWhilePlanningAppliesNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFake(cleanup()...)
	f.afterSnapshot = func(_ *fakeTarget, n int) {
		if n == 1 {
			cancel()
		}
	}
	rep, err := newConsolidator(t, nil, consolidator.Policy{}).Run(ctx, f, "run-1")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v; want context.Canceled", err)
	}
	if len(f.appliedChanges()) != 0 || len(rep.Decisions) != 0 {
		t.Fatalf("a run abandoned while planning applied %v (report %v)", f.appliedChanges(), rep.Decisions)
	}
}

// Sets large enough to be searched by hashing (ExhaustiveBelow) still give the same
// decisions for the same memories in any order.
func TestPlanOfALargeNamespaceIsTheSameInAnyOrder(t *testing.T) {
	mems := namespaceOf(4000, 2)
	want := consolidator.Plan(now, mems, consolidator.Policy{})
	kinds := map[consolidator.Kind]int{}
	for _, d := range want {
		kinds[d.Kind]++
	}
	if kinds[consolidator.Merge] == 0 || kinds[consolidator.Distill] == 0 || kinds[consolidator.Invalidate] == 0 {
		t.Fatalf("decisions by kind %v: want merges, distillations and invalidations", kinds)
	}
	r := rand.New(rand.NewPCG(3, 4))
	r.Shuffle(len(mems), func(i, j int) { mems[i], mems[j] = mems[j], mems[i] })
	if got := consolidator.Plan(now, mems, consolidator.Policy{}); !reflect.DeepEqual(got, want) {
		t.Fatalf("shuffled: %d decisions, unlike the %d planned before", len(got), len(want))
	}
}
