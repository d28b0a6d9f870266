package consolidator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// fakeTarget is a namespace in a map that behaves as the contract says: a key it has
// applied is not applied again, unknown IDs are memory.ErrNotFound. It records every
// change it applies.
type fakeTarget struct {
	mu      sync.Mutex
	name    string
	mems    map[string]memory.Memory
	seen    map[string]memory.Memory // key → result
	applied []string                 // "kind key ids", one per change applied
	dups    int                      // calls with a key already applied
	next    int
	// frozen, when set, is what Snapshot returns (a stale projection).
	frozen []memory.Memory
	// afterSnapshot, when set, runs after each Snapshot (n counts from 1).
	afterSnapshot func(f *fakeTarget, n int)
	snapshots     int
	// failAt makes the change number failAt (from 1) fail after it is applied, as a
	// write whose answer was lost would.
	failAt int
	// panicOnSnapshot panics that many Snapshots.
	panicOnSnapshot int
}

var _ consolidator.Target = (*fakeTarget)(nil)

var errLost = errors.New("fake: connection lost after the write")

func newFake(mems ...memory.Memory) *fakeTarget {
	f := &fakeTarget{name: "user:alice", mems: map[string]memory.Memory{}, seen: map[string]memory.Memory{}}
	for _, m := range mems {
		f.mems[m.ID] = m
	}
	return f
}

func (f *fakeTarget) Name() string { return f.name }

func (f *fakeTarget) Snapshot() []memory.Memory {
	f.mu.Lock()
	if f.panicOnSnapshot > 0 {
		f.panicOnSnapshot--
		f.mu.Unlock()
		panic("fake: projection corrupted")
	}
	f.snapshots++
	n := f.snapshots
	var out []memory.Memory
	if f.frozen != nil {
		out = slices.Clone(f.frozen)
	} else {
		for _, m := range f.mems {
			out = append(out, m)
		}
		slices.SortFunc(out, func(a, b memory.Memory) int { return strings.Compare(a.ID, b.ID) })
	}
	hook := f.afterSnapshot
	f.mu.Unlock()
	if hook != nil {
		hook(f, n)
	}
	return out
}

// change applies one change under key once, unless a memory opts expect at a
// version (memory.Expect) is at another; do returns its result.
func (f *fakeTarget) change(key, what string, ids []string, opts []memory.WriteOption, do func() (memory.Memory, error)) (memory.Memory, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m, ok := f.seen[key]; ok {
		f.dups++
		return m, nil
	}
	for _, id := range ids {
		if _, ok := f.mems[id]; !ok {
			return memory.Memory{}, fmt.Errorf("%w: %s", memory.ErrNotFound, id)
		}
	}
	if err := memory.WriteOptionsOf(opts...).Check(f.name, func(id string) (uint64, bool) {
		m, ok := f.mems[id]
		return m.Version, ok
	}); err != nil {
		return memory.Memory{}, err
	}
	m, err := do()
	if err != nil {
		return m, err
	}
	f.seen[key] = m
	f.applied = append(f.applied, fmt.Sprintf("%s %s %s", what, key, strings.Join(ids, ",")))
	if len(f.applied) == f.failAt {
		return memory.Memory{}, errLost
	}
	return m, nil
}

func (f *fakeTarget) Forget(_ context.Context, key string, ids []string, _ string, opts ...memory.WriteOption) error {
	_, err := f.change(key, "forget", ids, opts, func() (memory.Memory, error) {
		for _, id := range ids {
			delete(f.mems, id)
		}
		return memory.Memory{}, nil
	})
	return err
}

func (f *fakeTarget) Merge(_ context.Context, key, into string, merged []string, _ string, opts ...memory.WriteOption) (memory.Memory, error) {
	return f.change(key, "merge", append([]string{into}, merged...), opts, func() (memory.Memory, error) {
		m := f.mems[into]
		for _, id := range merged {
			m.Sources = append(m.Sources, messages.MemorySource{Kind: "memory", ID: id})
			delete(f.mems, id)
		}
		f.mems[into] = m
		return m, nil
	})
}

func (f *fakeTarget) Promote(_ context.Context, key, id string, to memory.Tier, _ string, opts ...memory.WriteOption) (memory.Memory, error) {
	return f.change(key, "promote", []string{id}, opts, func() (memory.Memory, error) {
		m := f.mems[id]
		m.Tier = to
		f.mems[id] = m
		return m, nil
	})
}

func (f *fakeTarget) Distill(_ context.Context, key string, sources []string, content string, importance float64, _ string, opts ...memory.WriteOption) (memory.Memory, error) {
	return f.change(key, "distill", sources, opts, func() (memory.Memory, error) {
		if strings.TrimSpace(content) == "" {
			return memory.Memory{}, fmt.Errorf("%w: empty content", memory.ErrInvalid)
		}
		if strings.ContainsRune(content, 0) { // as memory.Namespace.Distill
			return memory.Memory{}, fmt.Errorf("%w: content holds a NUL byte", memory.ErrInvalid)
		}
		f.next++
		m := memory.Memory{ID: fmt.Sprintf("m_new%d", f.next), Namespace: f.name, Tier: memory.Semantic,
			Content: content, Importance: importance, Created: now, Timestamp: now}
		for _, id := range sources {
			m.Sources = append(m.Sources, messages.MemorySource{Kind: "memory", ID: id})
		}
		f.mems[m.ID] = m
		return m, nil
	})
}

func (f *fakeTarget) Invalidate(_ context.Context, key, id, by, _ string, opts ...memory.WriteOption) error {
	_, err := f.change(key, "invalidate", []string{id, by}, opts, func() (memory.Memory, error) {
		m := f.mems[id]
		at := now
		m.InvalidAt, m.InvalidBy = &at, by
		f.mems[id] = m
		return m, nil
	})
	return err
}

func (f *fakeTarget) appliedChanges() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.applied)
}

func (f *fakeTarget) get(id string) (memory.Memory, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.mems[id]
	return m, ok
}

// recording wraps a model and keeps its requests.
type recording struct {
	llm.Model
	mu   sync.Mutex
	reqs []llm.Request
}

func (r *recording) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.Model.Generate(ctx, req)
}

func scripted(t *testing.T, answers ...string) *recording {
	t.Helper()
	var steps []llm.ScriptStep
	for _, a := range answers {
		steps = append(steps, llm.ScriptStep{Content: a})
	}
	m, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	return &recording{Model: m}
}

func newConsolidator(t *testing.T, model llm.Model, p consolidator.Policy) *consolidator.Consolidator {
	t.Helper()
	cfg := consolidator.Config{Policy: p, Now: func() time.Time { return now }}
	if model != nil {
		cfg.Model = model
	}
	c, err := consolidator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRunDistilsAClusterIntoAFactLinkedToItsSources(t *testing.T) {
	f := newFake(episodes()...)
	model := scripted(t, "```json\n{\"fact\": \"Alice prefers morning meetings.\", \"importance\": 0.8}\n```")
	rep, err := newConsolidator(t, model, only(consolidator.Policy{ClusterThreshold: 0.8})).Run(context.Background(), f, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Distilled != 1 || len(rep.Decisions) != 1 || len(rep.Skipped) != 0 {
		t.Fatalf("report:\n%s", rep)
	}
	d := rep.Decisions[0]
	fact, ok := f.get(d.Into)
	if !ok {
		t.Fatalf("the distilled memory %q is not in the namespace", d.Into)
	}
	if fact.Tier != memory.Semantic || fact.Content != "Alice prefers morning meetings." || fact.Importance != 0.8 {
		t.Errorf("distilled %+v", fact)
	}
	var sources []string
	for _, s := range fact.Sources {
		sources = append(sources, s.Kind+":"+s.ID)
	}
	if want := []string{"memory:e1", "memory:e2", "memory:e3"}; !slices.Equal(sources, want) {
		t.Errorf("sources %v, want %v", sources, want)
	}
	if want := "3 episodic memories within cosine 0.85 ≥ 0.8 of e1, not yet distilled; summarised by scripted"; d.Reason != want {
		t.Errorf("reason %q, want %q", d.Reason, want)
	}
	// The prompt shows the cluster, oldest first.
	prompt := model.reqs[0].Messages[1].Content
	i1, i2, i3 := strings.Index(prompt, "content of e1"), strings.Index(prompt, "content of e2"), strings.Index(prompt, "content of e3")
	if i1 < 0 || i1 > i2 || i2 > i3 || strings.Contains(prompt, "content of e4") {
		t.Errorf("prompt:\n%s", prompt)
	}
	if !strings.Contains(rep.String(), "distilled 1") || !strings.Contains(rep.String(), "Alice prefers morning meetings.") {
		t.Errorf("report:\n%s", rep)
	}
}

// A model that copies a NUL from a memory stored before such content was refused
// (or answers one) gets its fact distilled without it, rather than the namespace
// refusing the distillation at every run.
func TestRunDistilsAFactHoldingANulWithoutIt(t *testing.T) {
	f := newFake(episodes()...)
	model := scripted(t, `{"fact": "Alice prefers\u0000 morning meetings.\u0000", "importance": 0.8}`)
	rep, err := newConsolidator(t, model, only(consolidator.Policy{ClusterThreshold: 0.8})).Run(context.Background(), f, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Distilled != 1 || len(rep.Skipped) != 0 {
		t.Fatalf("report:\n%s", rep)
	}
	if fact, _ := f.get(rep.Decisions[0].Into); fact.Content != "Alice prefers morning meetings." {
		t.Errorf("distilled %q", fact.Content)
	}
}

func TestRunWithoutAModelDistilsNothing(t *testing.T) {
	f := newFake(episodes()...)
	rep, err := newConsolidator(t, nil, only(consolidator.Policy{ClusterThreshold: 0.8, ConflictThreshold: 0.75})).Run(context.Background(), f, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Distilled != 0 || len(f.appliedChanges()) != 0 {
		t.Fatalf("applied %v\n%s", f.appliedChanges(), rep)
	}
	if len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0], "distill e1, e2, e3: no model configured") {
		t.Errorf("skipped %q", rep.Skipped)
	}
}

func TestRunGarbageFromTheModelAppliesNothingForThatCluster(t *testing.T) {
	mems := append(episodes(), mem("w", memory.Working, 0.9, time.Hour))
	for _, answer := range []string{`{"fact": "Alice likes`, `{"summary": 42}`, `{"thoughts": "many"}`, strings.Repeat("word ", 300)} {
		t.Run(answer[:8], func(t *testing.T) {
			f := newFake(mems...)
			c := newConsolidator(t, scripted(t, answer), only(consolidator.Policy{ClusterThreshold: 0.8, PromoteAbove: 0.7}))
			rep, err := c.Run(context.Background(), f, "run1")
			if err != nil {
				t.Fatal(err)
			}
			// The promotion is applied; the cluster is not.
			if got := f.appliedChanges(); len(got) != 1 || !strings.HasPrefix(got[0], "promote ") {
				t.Errorf("applied %v", got)
			}
			if rep.Distilled != 0 || rep.Promoted != 1 || len(rep.Skipped) != 1 {
				t.Fatalf("report:\n%s", rep)
			}
			if s := rep.Skipped[0]; !strings.HasPrefix(s, "distill e1, e2, e3: model scripted answered what cannot be read, nothing distilled: consolidator: unreadable model answer") {
				t.Errorf("skipped %q", s)
			}
		})
	}
}

func TestRunModelFindingNoFactDistilsNothing(t *testing.T) {
	f := newFake(episodes()...)
	rep, err := newConsolidator(t, scripted(t, `{"fact": ""}`), only(consolidator.Policy{ClusterThreshold: 0.8})).Run(context.Background(), f, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.appliedChanges()) != 0 || len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0], "no durable fact") {
		t.Fatalf("applied %v\n%s", f.appliedChanges(), rep)
	}
}

func TestRunConflictsJudgedByTheModel(t *testing.T) {
	mems := []memory.Memory{
		withVector(mem("a", memory.Semantic, 0.5, 10*day), 1, 0, 0, 0),        // older
		withVector(mem("b", memory.Semantic, 0.5, 5*day), 0.8, 0.6, 0, 0),     // cosine 0.8 with a
		withVector(mem("c", memory.Semantic, 0.5, 10*day), 0, 0, 1, 0),        // older
		withVector(mem("d", memory.Semantic, 0.5, 5*day), 0, 0, 0.78, 0.6258), // cosine 0.78 with c
	}
	mems[0].Content, mems[1].Content = "Alice's favourite colour is blue.", "Alice's favourite colour is green."
	f := newFake(mems...)
	model := scripted(t,
		`{"contradicts": true, "reason": "one favourite colour at a time"}`,
		"No, they are about different things.")
	rep, err := newConsolidator(t, model, only(consolidator.Policy{ConflictThreshold: 0.75})).Run(context.Background(), f, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Invalidated != 1 || len(rep.Decisions) != 1 {
		t.Fatalf("report:\n%s", rep)
	}
	a, _ := f.get("a")
	if a.InvalidAt == nil || a.InvalidBy != "b" {
		t.Errorf("a = %+v, want invalidated by b", a)
	}
	if c, _ := f.get("c"); c.InvalidAt != nil {
		t.Errorf("c was invalidated")
	}
	if want := "cosine 0.8 ≥ 0.75 with newer b; judged contradicts it by scripted: one favourite colour at a time"; rep.Decisions[0].Reason != want {
		t.Errorf("reason %q, want %q", rep.Decisions[0].Reason, want)
	}
	if len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0], "invalidate c by d: not contradicted: cosine 0.78 ≥ 0.75 with newer d; judged compatible by scripted: they are about different things.") {
		t.Errorf("skipped %q", rep.Skipped)
	}
	if p := model.reqs[0].Messages[1].Content; !strings.Contains(p, `<memory fact="older" id="a" date="2026-05-22">Alice's favourite colour is blue.</memory>`) ||
		!strings.Contains(p, `<memory fact="newer" id="b" date="2026-05-27">Alice's favourite colour is green.</memory>`) {
		t.Errorf("prompt:\n%s", p)
	}
}

func TestRunFunctionalConflictNeedsNoModel(t *testing.T) {
	mems := []memory.Memory{
		withRelation(mem("s1", memory.Semantic, 0.5, 142*day), "alice", "lives_in", "paris"),
		withRelation(mem("s2", memory.Semantic, 0.5, 92*day), "alice", "lives_in", "berlin"),
	}
	f := newFake(mems...)
	rep, err := newConsolidator(t, nil, consolidator.Policy{}).Run(context.Background(), f, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if s1, _ := f.get("s1"); rep.Invalidated != 1 || s1.InvalidBy != "s2" {
		t.Fatalf("s1 = %+v\n%s", s1, rep)
	}
	if s2, _ := f.get("s2"); s2.InvalidAt != nil {
		t.Errorf("the newer fact was invalidated")
	}
}

// cleanup is a namespace with something for each rule but distillation.
func cleanup() []memory.Memory {
	return []memory.Memory{
		mem("old1", memory.Episodic, 0.1, 40*day),
		mem("old2", memory.Episodic, 0.1, 50*day),
		withHash(mem("dup1", memory.Working, 0.5, time.Hour), "h"),
		withHash(mem("dup2", memory.Working, 0.5, 2*time.Hour), "h"),
		mem("hot", memory.Working, 0.9, time.Hour),
		withRelation(mem("s1", memory.Semantic, 0.5, 142*day), "alice", "lives_in", "paris"),
		withRelation(mem("s2", memory.Semantic, 0.5, 92*day), "alice", "lives_in", "berlin"),
	}
}

func TestRunTwiceWithTheSameKeyAppliesNothingTwice(t *testing.T) {
	// The third change is applied, but its answer is lost: the run fails.
	f := newFake(cleanup()...)
	f.failAt = 3
	c := newConsolidator(t, nil, consolidator.Policy{})
	rep, err := c.Run(context.Background(), f, "run1")
	if !errors.Is(err, errLost) {
		t.Fatalf("first run: err %v, want the lost write\n%s", err, rep)
	}
	if len(rep.Decisions) != 2 {
		t.Errorf("first run: %d decisions reported applied, want 2:\n%s", len(rep.Decisions), rep)
	}
	// The run again, with the same key, does the rest.
	f.failAt = 0
	rep, err = c.Run(context.Background(), f, "run1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"forget run1/forget-", "forget run1/forget-", "merge run1/merge-", "promote run1/promote-", "invalidate run1/invalidate-"}
	got := f.appliedChanges()
	if len(got) != len(want) {
		t.Fatalf("applied %d changes, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range got {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("change %d: %q, want %s…", i+1, got[i], want[i])
		}
	}
	// A third run has nothing left to do.
	rep, err = c.Run(context.Background(), f, "run1")
	if err != nil || len(rep.Decisions) != 0 || len(f.appliedChanges()) != len(want) {
		t.Errorf("third run: err %v, %d more changes\n%s", err, len(f.appliedChanges())-len(want), rep)
	}
}

func TestRunAgainstAStaleSnapshotReusesItsKeys(t *testing.T) {
	f := newFake(cleanup()...)
	f.frozen = cleanup() // the projection never catches up
	c := newConsolidator(t, nil, consolidator.Policy{})
	if _, err := c.Run(context.Background(), f, "run1"); err != nil {
		t.Fatal(err)
	}
	first := f.appliedChanges()
	if _, err := c.Run(context.Background(), f, "run1"); err != nil {
		t.Fatal(err)
	}
	if got := f.appliedChanges(); !slices.Equal(got, first) || f.dups != len(first) {
		t.Errorf("the second run applied %d more changes and repeated %d keys of %d:\n%s",
			len(got)-len(first), f.dups, len(first), strings.Join(got, "\n"))
	}
}

func TestRunSkipsDecisionsWhoseMemoriesVanished(t *testing.T) {
	f := newFake(cleanup()...)
	f.afterSnapshot = func(f *fakeTarget, n int) {
		if n == 1 { // planned; then another writer forgets two memories
			f.mu.Lock()
			delete(f.mems, "old1")
			delete(f.mems, "dup1")
			f.mu.Unlock()
		}
	}
	rep, err := newConsolidator(t, nil, consolidator.Policy{}).Run(context.Background(), f, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Forgotten != 1 || rep.Merged != 0 || rep.Promoted != 1 || rep.Invalidated != 1 {
		t.Errorf("report:\n%s", rep)
	}
	want := []string{"forget old1: old1 vanished meanwhile", "merge dup1 into dup2: dup1 vanished meanwhile"}
	if !slices.Equal(rep.Skipped, want) {
		t.Errorf("skipped %q, want %q", rep.Skipped, want)
	}
}

func TestRunNeedsAKey(t *testing.T) {
	_, err := newConsolidator(t, nil, consolidator.Policy{}).Run(context.Background(), newFake(), "")
	if !errors.Is(err, memory.ErrInvalid) {
		t.Errorf("err %v, want memory.ErrInvalid", err)
	}
}

func TestReportString(t *testing.T) {
	f := newFake(cleanup()...)
	rep, err := newConsolidator(t, nil, consolidator.Policy{}).Run(context.Background(), f, "run1")
	if err != nil {
		t.Fatal(err)
	}
	want := `consolidated user:alice: forgot 2, merged 1, promoted 1, distilled 0, invalidated 1
- forget old2: importance 0.1 < 0.2 and age 50d > 30d
- forget old1: importance 0.1 < 0.2 and age 40d > 30d
- merge dup1 into dup2: same content hash as dup2
- promote hot to episodic: importance 0.9 > 0.7
- invalidate s1 by s2: newer s2 (2026-03-01) says alice lives_in berlin, this (2026-01-10) says alice lives_in paris: lives_in is functional`
	if got := rep.String(); got != want {
		t.Errorf("report:\n%s\nwant:\n%s", got, want)
	}
}

// refreshing is a target whose Snapshot is as of its last Refresh.
type refreshing struct {
	*fakeTarget
	refreshes int
	err       error
}

func (r *refreshing) Refresh(context.Context) error {
	r.refreshes++
	return r.err
}

func TestRunRefreshesATargetThatCanBeStale(t *testing.T) {
	r := &refreshing{fakeTarget: newFake(cleanup()...)}
	c := newConsolidator(t, nil, consolidator.Policy{})
	if _, err := c.Run(context.Background(), r, "run1"); err != nil || r.refreshes != 2 {
		t.Fatalf("err %v, %d refreshes, want 2 (before planning and before applying)", err, r.refreshes)
	}
	r = &refreshing{fakeTarget: newFake(cleanup()...), err: errLost}
	if _, err := c.Run(context.Background(), r, "run1"); !errors.Is(err, errLost) || len(r.appliedChanges()) != 0 {
		t.Errorf("a failed refresh: err %v, applied %v", err, r.appliedChanges())
	}
}
