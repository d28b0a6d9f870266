package consolidator_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/vectorstore"
)

// meanwhile is a namespace that runs a hook once, after the Snapshot the run plans
// from: another writer's change landing while the run plans (which takes minutes
// in a large namespace) or waits for its model.
type meanwhile struct {
	*memory.Namespace
	once sync.Once
	hook func()
}

func (m *meanwhile) Snapshot() []memory.Memory {
	s := m.Namespace.Snapshot()
	m.once.Do(m.hook)
	return s
}

func openNamespace(t *testing.T, name string) *memory.Namespace {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	vs, err := vectorstore.Open(vectorstore.Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vs.Close() })
	m, err := memory.Open(memory.Config{Log: l, Vectors: vs, Embedder: llm.HashingEmbedder{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	ns, err := m.Namespace(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// A memory the user rewrote while a run planned to merge it as a duplicate of
// another is not merged away: the run's reason ("cosine 1 ≥ 0.92") no longer holds,
// and the merge would delete the user's new text.
func TestRunDoesNotMergeAMemoryRewrittenMeanwhile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := openNamespace(t, "user:alice")
	res, err := ns.Add(ctx, "k1", []memory.AddRequest{
		{Tier: memory.Semantic, Content: "Alice lives in Lisbon"},
		{Tier: memory.Semantic, Content: "Alice lives in Lisbon."},
	})
	if err != nil {
		t.Fatal(err)
	}
	rewritten := res[1].ID
	porto := "Alice moved to Porto in May"
	target := &meanwhile{Namespace: ns, hook: func() {
		if _, err := ns.Update(ctx, "user-edit", rewritten, memory.UpdateRequest{Content: &porto}); err != nil {
			t.Error(err)
		}
	}}
	c, err := consolidator.New(consolidator.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Run(ctx, target, "run1")
	if err != nil {
		t.Fatal(err)
	}
	m, ok := ns.Get(rewritten)
	if !ok || m.Content != porto {
		t.Errorf("the memory rewritten meanwhile (%q) is gone or changed: %+v, %v\n%s", porto, m, ok, rep)
	}
	for _, x := range ns.Snapshot() {
		if strings.Contains(x.Content, "Porto") {
			return
		}
	}
	t.Errorf("no live memory holds the user's rewrite %q\n%s", porto, rep)
}

// A memory invalidated while a run planned to merge a duplicate into it is not
// merged into: the duplicate, still true, would go into a memory searches skip.
func TestRunDoesNotMergeIntoAMemoryInvalidatedMeanwhile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := openNamespace(t, "user:alice")
	keep, other := 0.6, 0.5
	res, err := ns.Add(ctx, "k1", []memory.AddRequest{
		{Tier: memory.Semantic, Content: "Alice lives in Lisbon", Importance: &keep},
		{Tier: memory.Semantic, Content: "Alice lives in Lisbon.", Importance: &other},
	})
	if err != nil {
		t.Fatal(err)
	}
	kept, dup := res[0].ID, res[1].ID
	target := &meanwhile{Namespace: ns, hook: func() {
		if err := ns.Invalidate(ctx, "user-edit", kept, "", "the user said it is wrong"); err != nil {
			t.Error(err)
		}
	}}
	c, err := consolidator.New(consolidator.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Run(ctx, target, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := ns.Get(dup); !ok || m.InvalidAt != nil {
		t.Errorf("the valid duplicate %s was merged into the memory invalidated meanwhile: %v\n%s", dup, ok, rep)
	}
}
