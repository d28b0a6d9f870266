package memory_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/vectorstore"
)

// moodyStore refuses the batches that hold an item whose text contains "POISON"
// while refusing is set: a transient error the store gives as a refusal.
type moodyStore struct {
	vectorstore.Store
	refusing atomic.Bool
	refused  atomic.Int64
}

func (s *moodyStore) Upsert(ctx context.Context, coll string, items []vectorstore.Item) error {
	for _, it := range items {
		if s.refusing.Load() && strings.Contains(it.Text, "POISON") {
			s.refused.Add(1)
			return fmt.Errorf("%w: item %q: payload refused (test)", vectorstore.ErrRefused, it.ID)
		}
	}
	return s.Store.Upsert(ctx, coll, items)
}

// A vector the store refused is tried again in the background after
// Config.VectorRetry, the wait doubling at each refusal: once the store takes it,
// a search by vector finds the memory, with no write to the namespace.
func TestRefusedVectorIsTriedAgainAfterAWait(t *testing.T) {
	ctx := testCtx(t)
	store := &moodyStore{Store: openStore(t, "")}
	store.refusing.Store(true)
	f := newFixture(t, func(c *memory.Config) { c.Vectors, c.VectorRetry = store, 20*time.Millisecond })
	ns := f.ns(t, "user:fay")
	res := add(t, ns, "k1", memory.AddRequest{Tier: memory.Semantic, Content: "Fay plays the harp"},
		memory.AddRequest{Tier: memory.Semantic, Content: "POISON Fay keeps goats"})
	if n := f.mem.ParkedVectors(); n != 1 {
		t.Fatalf("ParkedVectors = %d, want 1", n)
	}
	// Refused again on its tries: each try waits longer than the one before.
	deadline := time.Now().Add(30 * time.Second)
	for f.mem.ParkedRetries() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the refused vector was tried again %d times in 30s; want tries again after a wait", f.mem.ParkedRetries())
		}
		if err := f.mem.CatchUpVectors(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := f.mem.ParkedVectors(); n != 1 {
		t.Fatalf("ParkedVectors = %d after tries the store refused, want 1", n)
	}
	store.refusing.Store(false)
	for f.mem.ParkedVectors() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the vector the store takes again was not written within 30s")
		}
		if err := f.mem.CatchUpVectors(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	got, err := ns.Search(ctx, memory.Query{Text: "Fay keeps goats", Mode: memory.ModeVector, Tiers: []memory.Tier{memory.Semantic}, Limit: 1})
	if err != nil || len(got) != 1 || got[0].Memory.ID != res[1].ID {
		t.Fatalf("a search by vector once the store took the vector: %v, %v; want %s", resultIDs(got), err, res[1].ID)
	}
	_, note, err := ns.SearchNoted(ctx, memory.Query{Text: "Fay keeps goats"})
	if err != nil || note != "" {
		t.Fatalf("a hybrid search once the store took the vector: note %q, %v; want none", note, err)
	}
	if n := f.mem.VectorBacklog(); n != 0 {
		t.Fatalf("VectorBacklog = %d; want 0", n)
	}
}
