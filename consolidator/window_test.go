package consolidator_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/vectorstore"
)

// window is a namespace in which another writer changes a memory in the window
// between the run's last check ("changed meanwhile", against a fresh snapshot) and
// its write: before is called with the IDs the write is given, once, just before
// the write goes to the namespace.
type window struct {
	*memory.Namespace
	before func(ids []string)
	done   bool
}

func (w *window) hook(ids []string) {
	if !w.done && w.before != nil {
		w.done = true
		w.before(ids)
	}
}

func (w *window) Forget(ctx context.Context, key string, ids []string, reason string, opts ...memory.WriteOption) error {
	w.hook(ids)
	return w.Namespace.Forget(ctx, key, ids, reason, opts...)
}

func (w *window) Merge(ctx context.Context, key, into string, merged []string, reason string, opts ...memory.WriteOption) (memory.Memory, error) {
	w.hook(merged)
	return w.Namespace.Merge(ctx, key, into, merged, reason, opts...)
}

// sharedNamespaces opens name twice over one log and one vector store: two
// processes (nodes) sharing the namespace's stream, each with its own fold.
func sharedNamespaces(t *testing.T, name string) (mine, theirs *memory.Namespace) {
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
	var out [2]*memory.Namespace
	for i := range out {
		m, err := memory.Open(memory.Config{Log: l, Vectors: vs, Embedder: llm.HashingEmbedder{}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		if out[i], err = m.Namespace(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	return out[0], out[1]
}

// A memory the user rewrote in the window between the run's last check and its
// merge is not merged away: the merge would drop the user's new text (a merged
// memory's content is not kept), silently.
func TestMergeInTheWindowKeepsTheUsersRewrite(t *testing.T) {
	for _, shared := range []bool{false, true} {
		name := map[bool]string{false: "same process", true: "another node on the log"}[shared]
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var ns, writer *memory.Namespace
			if shared {
				ns, writer = sharedNamespaces(t, "user:alice")
			} else {
				ns = openNamespace(t, "user:alice")
				writer = ns
			}
			if _, err := ns.Add(ctx, "k1", []memory.AddRequest{
				{Tier: memory.Semantic, Content: "Alice lives in Lisbon"},
				{Tier: memory.Semantic, Content: "Alice lives in Lisbon."},
			}); err != nil {
				t.Fatal(err)
			}
			if err := writer.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			porto := "Alice moved to Porto in May"
			var rewritten string
			target := &window{Namespace: ns, before: func(ids []string) {
				rewritten = ids[0]
				if _, err := writer.Update(ctx, "user-edit", rewritten, memory.UpdateRequest{Content: &porto}); err != nil {
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
			if rewritten == "" {
				t.Fatalf("no merge was tried:\n%s", rep)
			}
			if err := ns.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if m, ok := ns.Get(rewritten); !ok || m.Content != porto {
				t.Errorf("the memory rewritten in the window (%q) is gone or changed: %+v, %v\n%s", porto, m, ok, rep)
			}
			if rep.Merged != 0 || !strings.Contains(strings.Join(rep.Skipped, "\n"), "changed meanwhile") {
				t.Errorf("the merge is not reported skipped as changed meanwhile:\n%s", rep)
			}
		})
	}
}

// A memory the user re-weighed in the window between the run's last check and its
// forgetting (old and unimportant, as planned) is not forgotten: its new
// importance says to keep it.
func TestForgetInTheWindowKeepsAMemoryReweighed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := openNamespace(t, "user:alice")
	low := 0.1
	res, err := ns.Add(ctx, "k1", []memory.AddRequest{
		{Tier: memory.Episodic, Content: "Alice asked about the weather in Lisbon", Importance: &low, Timestamp: time.Now().Add(-40 * 24 * time.Hour)},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := res[0].ID
	high := 0.9
	target := &window{Namespace: ns, before: func([]string) {
		if _, err := ns.Update(ctx, "user-edit", id, memory.UpdateRequest{Importance: &high}); err != nil {
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
	if !target.done {
		t.Fatalf("no forgetting was tried:\n%s", rep)
	}
	if m, ok := ns.Get(id); !ok || m.Importance != high {
		t.Errorf("the memory re-weighed to %v in the window was forgotten: %+v, %v\n%s", high, m, ok, rep)
	}
	if rep.Forgotten != 0 || !strings.Contains(strings.Join(rep.Skipped, "\n"), "changed meanwhile") {
		t.Errorf("the forgetting is not reported skipped as changed meanwhile:\n%s", rep)
	}
}

// A decision refused because its memory changed in the window is applied by a run
// repeated (under the same key: the refusal used none of it) once the memory is
// stable, if it still holds: here the user only tagged the duplicate, whose tag
// the merge then keeps.
func TestRunAfterAConflictAppliesTheDecision(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := openNamespace(t, "user:alice")
	if _, err := ns.Add(ctx, "k1", []memory.AddRequest{
		{Tier: memory.Semantic, Content: "Alice lives in Lisbon"},
		{Tier: memory.Semantic, Content: "Alice lives in Lisbon."},
	}); err != nil {
		t.Fatal(err)
	}
	var tagged string
	target := &window{Namespace: ns, before: func(ids []string) {
		tagged = ids[0]
		if _, err := ns.Update(ctx, "user-edit", tagged, memory.UpdateRequest{Metadata: []byte(`{"checked":"by alice"}`)}); err != nil {
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
	if rep.Merged != 0 || len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0], "changed meanwhile") {
		t.Fatalf("first run: want the merge skipped as changed meanwhile:\n%s", rep)
	}
	if _, ok := ns.Get(tagged); !ok {
		t.Fatalf("the memory tagged in the window was merged away:\n%s", rep)
	}
	rep, err = c.Run(ctx, target, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Merged != 1 || len(rep.Skipped) != 0 {
		t.Fatalf("second run: want the merge applied:\n%s", rep)
	}
	if _, ok := ns.Get(tagged); ok {
		t.Fatalf("the duplicate %s is still there:\n%s", tagged, rep)
	}
	snap := ns.Snapshot()
	src, _ := json.Marshal(snap[0].Sources)
	if len(snap) != 1 || !strings.Contains(string(src), "by alice") {
		t.Fatalf("after the merge: %d memories, sources %s; want one that keeps the tag of %s", len(snap), src, tagged)
	}
}
