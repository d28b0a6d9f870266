package memory_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/vectorstore"
)

// pickyStore refuses every batch that holds an item whose text contains "POISON",
// as Milvus refuses a batch for one payload it does not take.
type pickyStore struct{ vectorstore.Store }

func (s pickyStore) Upsert(ctx context.Context, coll string, items []vectorstore.Item) error {
	for _, it := range items {
		if strings.Contains(it.Text, "POISON") {
			return fmt.Errorf("%w: item %q: payload refused (test)", vectorstore.ErrRefused, it.ID)
		}
	}
	return s.Store.Upsert(ctx, coll, items)
}

// A memory whose vector the store refuses does not hold up the others of its
// collection: the rest of its batch and the later writes reach the store, the
// refused one is parked (told to Config.VectorParked, named in a hybrid search's
// note) and still found by keyword, and nothing waits for the store.
func TestRefusedVectorIsParkedNotBlocking(t *testing.T) {
	ctx := testCtx(t)
	inner := openStore(t, "")
	var mu sync.Mutex
	var parked []string
	f := newFixture(t, func(c *memory.Config) {
		c.Vectors = pickyStore{inner}
		c.VectorParked = func(ns, coll, id string, err error) {
			mu.Lock()
			defer mu.Unlock()
			if !errors.Is(err, vectorstore.ErrRefused) || !strings.Contains(err.Error(), id) {
				t.Errorf("VectorParked(%s, %s, %s): %v; want ErrRefused naming the memory", ns, coll, id, err)
			}
			parked = append(parked, ns+" "+coll+" "+id)
		}
	})
	ns := f.ns(t, "user:dana")
	first := add(t, ns, "k1",
		memory.AddRequest{Tier: memory.Semantic, Content: "Dana plays the cello"},
		memory.AddRequest{Tier: memory.Semantic, Content: "POISON Dana keeps bees"},
		memory.AddRequest{Tier: memory.Semantic, Content: "Dana lives in Ghent"})
	later := add(t, ns, "k2", memory.AddRequest{Tier: memory.Semantic, Content: "Dana drinks rooibos"})
	want := []string{first[0].ID, first[2].ID, later[0].ID}

	mu.Lock()
	if !slices.Equal(parked, []string{"user:dana mem_semantic_text " + first[1].ID}) {
		t.Errorf("parked %q, want only the poisoned memory %s", parked, first[1].ID)
	}
	mu.Unlock()
	hits, err := inner.Search(ctx, "mem_semantic_text", vectorstore.Query{Vector: unitVector(256), K: 100, Filter: map[string]string{"ns": "user:dana"}})
	var got []string
	for _, h := range hits {
		got = append(got, strings.TrimPrefix(h.ID, "user:dana/"))
	}
	slices.Sort(got)
	slices.Sort(want)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("the store holds %v (%v), want the vectors of every memory but the refused one: %v", got, err, want)
	}
	res, err := ns.Search(ctx, memory.Query{Text: "Dana drinks rooibos", Mode: memory.ModeVector, Tiers: []memory.Tier{memory.Semantic}, Limit: 1})
	if err != nil || !slices.Equal(resultIDs(res), []string{later[0].ID}) {
		t.Errorf("vector search: %v %v, want [%s]", resultIDs(res), err, later[0].ID)
	}
	res, note, err := ns.SearchNoted(ctx, memory.Query{Text: "Dana keeps bees"})
	if err != nil || len(res) == 0 || res[0].Memory.ID != first[1].ID || !strings.Contains(note, "refused") || !strings.Contains(note, "mem_semantic_text") {
		t.Errorf("hybrid search: %v %q %v; want the refused memory first (by keyword) and a note naming the refusal", resultIDs(res), note, err)
	}
	if n := f.mem.VectorBacklog(); n != 0 {
		t.Errorf("VectorBacklog = %d, want 0: a refused vector does not wait", n)
	}
}

// VectorBacklog counts the vectors that wait for the store while it is down, and
// falls to zero once it takes them.
func TestVectorBacklogRisesDuringOutage(t *testing.T) {
	ctx := testCtx(t)
	store := newFaultyStore(openStore(t, ""))
	f := newFixture(t, func(c *memory.Config) { c.Vectors = store })
	ns := f.ns(t, "user:erin")
	add(t, ns, "k1", memory.AddRequest{Tier: memory.Semantic, Content: "Erin likes jazz"})
	if n := f.mem.VectorBacklog(); n != 0 {
		t.Fatalf("VectorBacklog = %d before the outage, want 0", n)
	}
	store.down.Store(true)
	add(t, ns, "k2", memory.AddRequest{Tier: memory.Semantic, Content: "Erin rides a blue bike"},
		memory.AddRequest{Tier: memory.Episodic, Content: "Erin met Ann in Porto"})
	if n := f.mem.VectorBacklog(); n != 2 {
		t.Errorf("VectorBacklog = %d during the outage, want 2", n)
	}
	store.down.Store(false)
	if _, err := ns.Search(ctx, memory.Query{Text: "Erin", Mode: memory.ModeVector}); err != nil {
		t.Fatalf("vector search once the store is back: %v", err)
	}
	if n := f.mem.VectorBacklog(); n != 0 {
		t.Errorf("VectorBacklog = %d once the store is back, want 0", n)
	}
}

func unitVector(dim int) []float32 {
	v := make([]float32, dim)
	for i := range v {
		v[i] = 1
	}
	return v
}
