package consolidator

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
)

// factsTarget holds facts and changes nothing: a namespace whose runs plan and ask.
type factsTarget struct{ mems []memory.Memory }

func (f *factsTarget) Name() string              { return "user:alice" }
func (f *factsTarget) Snapshot() []memory.Memory { return slices.Clone(f.mems) }
func (f *factsTarget) Forget(context.Context, string, []string, string, ...memory.WriteOption) error {
	return nil
}
func (f *factsTarget) Merge(context.Context, string, string, []string, string, ...memory.WriteOption) (memory.Memory, error) {
	return memory.Memory{}, nil
}
func (f *factsTarget) Promote(context.Context, string, string, memory.Tier, string, ...memory.WriteOption) (memory.Memory, error) {
	return memory.Memory{}, nil
}
func (f *factsTarget) Distill(context.Context, string, []string, string, float64, string, ...memory.WriteOption) (memory.Memory, error) {
	return memory.Memory{}, nil
}
func (f *factsTarget) Invalidate(context.Context, string, string, string, string, ...memory.WriteOption) error {
	return nil
}

// stuckModel ends the run that asks it (cancel) and answers when its call ends.
type stuckModel struct{ cancel context.CancelFunc }

func (m stuckModel) Name() string { return "stuck" }
func (m stuckModel) Generate(ctx context.Context, _ llm.Request) (llm.Response, error) {
	m.cancel()
	<-ctx.Done()
	return llm.Response{}, ctx.Err()
}

// A NamespaceActor drops the answers of the model about memories since changed or
// gone even when its run is cut short after planning (the model slow, the run's
// timeout): before, it kept every answer a cut-short run was given, and a namespace
// whose runs ran out of time, as a slow model makes every one of them, held every
// answer it ever got for as long as the actor lived. A run that did not get to plan
// keeps them all.
func TestNamespaceActorDropsAnswersThatNoLongerHoldWhenARunIsCutShort(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	fact := func(id string, age time.Duration, v ...float32) memory.Memory {
		at := now.Add(-age)
		return memory.Memory{ID: id, Namespace: "user:alice", Tier: memory.Semantic, Modality: memory.Text,
			Content: "content of " + id, Importance: 0.5, Timestamp: at, Created: at, Updated: at, Vector: v, Version: 1}
	}
	day := 24 * time.Hour
	target := &factsTarget{mems: []memory.Memory{
		fact("a", 10*day, 1, 0, 0, 0), fact("b", 5*day, 0.8, 0.6, 0, 0),
		fact("c", 10*day, 0, 0, 1, 0), fact("d", 5*day, 0, 0, 0.78, 0.6258),
	}}
	off := Policy{MinImportance: -1, DuplicateThreshold: -1, PromoteAbove: -1, ClusterThreshold: -1,
		ConflictThreshold: 0.75, MaxJudgements: 1, Capacity: map[memory.Tier]int{}, MaxAge: map[memory.Tier]time.Duration{}}
	asker, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := New(Config{Model: stuckModel{cancel}, Policy: off, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	open := func(context.Context, string) (Target, error) { return target, nil }
	a := &NamespaceActor{ns: "user:alice", deps: &deps{open: open, consolidator: c, runTimeout: time.Minute,
		clock: SystemClock{}, logger: slog.New(slog.DiscardHandler), base: context.Background()}}
	// The answer about a/b holds; that about a/b as a was before (version 0) and one
	// about a memory since forgotten do not.
	ab := Decision{Kind: Invalidate, IDs: []string{"a"}, By: "b"}
	holds := Answer(ab, func(id string) (uint64, string) { return 1, "content of " + id })
	stale := Answer(ab, func(id string) (uint64, string) { return 0, "content of " + id })
	gone := Answer(Decision{Kind: Invalidate, IDs: []string{"x"}, By: "b"}, func(string) (uint64, string) { return 1, "x" })
	a.settled = []string{holds, stale, gone}
	if out := a.run(nil, "test", "run1", asker, nil); out.Err == nil {
		t.Fatalf("the run was not cut short:\n%s", out.Report)
	}
	if !slices.Equal(a.settled, []string{holds}) {
		t.Errorf("after a run cut short after planning the actor keeps %q, want only %q", a.settled, holds)
	}
	// A run that ends before it plans checked none of them: all are kept.
	a.settled = []string{holds, stale, gone}
	ended, end := context.WithCancel(context.Background())
	end()
	a.deps.base = ended
	if out := a.run(nil, "test", "run2", nil, nil); out.Err == nil {
		t.Fatal("the run of a context ended did not fail")
	}
	if want := slices.Sorted(slices.Values([]string{holds, stale, gone})); !slices.Equal(a.settled, want) {
		t.Errorf("after a run that did not plan the actor keeps %q, want %q", a.settled, want)
	}
}
