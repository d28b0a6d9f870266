package milvus_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/troupe-run/troupe/vectorstore"
	"github.com/troupe-run/troupe/vectorstore/milvus"
)

// A collection dropped and made again with another dimension by another client
// (the operator's migration to another embedding model, whose nodes make the
// collections anew) is the collection of that dimension for a Store that knew it
// before: it searches and writes vectors of the new dimension, and refuses those of
// the old one with ErrDimension, never as a refusal of the items by the server (which
// parks them for hours) nor as the server's internal error.
func TestCollectionMadeAgainWithAnotherDimension(t *testing.T) {
	t.Parallel()
	addr := serverAddr(t)
	prefix := testPrefix(t, addr)
	old := newStore(t, milvus.Config{Addr: addr, Prefix: prefix})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	v2 := []float32{1, 0}
	v3 := []float32{0, 0, 1}
	if err := old.Upsert(ctx, "c", []vectorstore.Item{{ID: "two", Vector: v2}}); err != nil {
		t.Fatal(err)
	}
	if hits, err := old.Search(ctx, "c", vectorstore.Query{Vector: v2, K: 1}); err != nil || len(hits) != 1 {
		t.Fatalf("Search: %v %v", hitIDs(hits), err)
	}
	dropPrefix(t, addr, prefix)
	other := newStore(t, milvus.Config{Addr: addr, Prefix: prefix})
	if err := other.Upsert(ctx, "c", []vectorstore.Item{{ID: "three", Vector: v3}}); err != nil {
		t.Fatal(err)
	}

	if hits, err := old.Search(ctx, "c", vectorstore.Query{Vector: v3, K: 5}); err != nil || !slices.Equal(hitIDs(hits), []string{"three"}) {
		t.Errorf("Search with the new dimension: %v %v, want [three]", hitIDs(hits), err)
	}
	if err := old.Upsert(ctx, "c", []vectorstore.Item{{ID: "two", Vector: v2}}); !errors.Is(err, vectorstore.ErrDimension) || errors.Is(err, vectorstore.ErrRefused) {
		t.Errorf("Upsert of the old dimension: %v, want ErrDimension", err)
	}
	if _, err := old.Search(ctx, "c", vectorstore.Query{Vector: v2, K: 5}); !errors.Is(err, vectorstore.ErrDimension) {
		t.Errorf("Search with the old dimension: %v, want ErrDimension", err)
	}
	if err := old.Upsert(ctx, "c", []vectorstore.Item{{ID: "four", Vector: []float32{0, 1, 0}}}); err != nil {
		t.Errorf("Upsert of the new dimension: %v", err)
	}
}
