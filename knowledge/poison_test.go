package knowledge_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/vectorstore"
)

// pickyStore refuses every batch that holds a chunk of source poison.md, as Milvus
// refuses a batch for one payload it does not take.
type pickyStore struct{ vectorstore.Store }

func (s pickyStore) Upsert(ctx context.Context, coll string, items []vectorstore.Item) error {
	for _, it := range items {
		if it.Metadata["source"] == "poison.md" {
			return fmt.Errorf("%w: item %q: payload refused (test)", vectorstore.ErrRefused, it.ID)
		}
	}
	return s.Store.Upsert(ctx, coll, items)
}

// A chunk whose vector the store refuses does not hold up the others: the chunks
// written after it reach the store, the refused one is parked (told to
// Config.VectorParked), searches still find it by vector (scored in memory beside
// the store's hits) with a note, and nothing waits for the store.
func TestRefusedChunkIsParkedNotBlocking(t *testing.T) {
	inner := openStore(t, "")
	var mu sync.Mutex
	var parked []string
	f := newFixture(t, func(c *knowledge.Config) {
		c.Vectors = pickyStore{inner}
		c.VectorParked = func(base, coll, id string, err error) {
			mu.Lock()
			defer mu.Unlock()
			if !errors.Is(err, vectorstore.ErrRefused) || !strings.Contains(err.Error(), "poison.md") {
				t.Errorf("VectorParked(%s, %s, %s): %v; want ErrRefused naming the source", base, coll, id, err)
			}
			parked = append(parked, id)
		}
	})
	b := f.base(t, "docs")
	addText(t, b, "a.md", "Tide tables for the harbour.")
	addText(t, b, "poison.md", "The lighthouse keeper logs the weather.")
	addText(t, b, "c.md", "Ferries leave the quay at noon.")

	mu.Lock()
	if len(parked) != 1 {
		t.Errorf("parked %q, want the one chunk of poison.md", parked)
	}
	mu.Unlock()
	if n := len(storeIDs(t, inner, "docs", 256)); n != 2 {
		t.Errorf("the store holds %d chunks, want 2: every chunk but the refused one", n)
	}
	res := search(t, b, knowledge.Query{Text: "ferries quay noon", Mode: knowledge.ModeVector, Limit: 1})
	if got := sources(res.Hits); !slices.Equal(got, []string{"c.md"}) {
		t.Errorf("vector search for a chunk written after the refused one: %v, want [c.md]", got)
	}
	res = search(t, b, knowledge.Query{Text: "lighthouse weather", Mode: knowledge.ModeVector, Limit: 1})
	if got := sources(res.Hits); !slices.Equal(got, []string{"poison.md"}) ||
		!slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "refused") }) {
		t.Errorf("vector search for the refused chunk: %v %q, want [poison.md] and a note on the refusal", got, res.Notes)
	}
	if n := f.bases.VectorBacklog(); n != 0 {
		t.Errorf("VectorBacklog = %d, want 0: a refused vector does not wait", n)
	}
}

// VectorBacklog counts the chunk vectors that wait for the store while it is
// down, and falls to zero once it takes them.
func TestKnowledgeVectorBacklogRisesDuringOutage(t *testing.T) {
	store := &flakyStore{Store: openStore(t, "")}
	clock := newTestClock()
	f := newFixture(t, func(c *knowledge.Config) {
		c.Vectors = store
		c.Now = clock.Now
	})
	b := f.base(t, "docs")
	addText(t, b, "a.md", "Tide tables for the harbour.")
	if n := f.bases.VectorBacklog(); n != 0 {
		t.Fatalf("VectorBacklog = %d before the outage, want 0", n)
	}
	store.down.Store(true)
	addText(t, b, "b.md", "The lighthouse keeper logs the weather.")
	addText(t, b, "c.md", "Ferries leave the quay at noon.")
	if n := f.bases.VectorBacklog(); n != 2 {
		t.Errorf("VectorBacklog = %d during the outage, want 2", n)
	}
	store.down.Store(false)
	clock.Add(time.Minute) // past the retry wait
	// No operation on the base: the node's catch-up (CatchUpVectors) writes them.
	if err := f.bases.CatchUpVectors(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if n := f.bases.VectorBacklog(); n != 0 {
		t.Errorf("VectorBacklog = %d once the store is back, want 0", n)
	}
}
