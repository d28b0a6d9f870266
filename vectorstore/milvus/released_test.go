package milvus_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/milvus-io/milvus-sdk-go/v2/client"

	"github.com/troupe-run/troupe/vectorstore"
	"github.com/troupe-run/troupe/vectorstore/milvus"
)

// A collection the server no longer holds loaded — a Milvus killed with kill -9
// and started again came back with the node's collection "not loaded", and an
// operator's release does the same — is loaded again by a Store that knew it
// loaded: before, the Store kept its collection as ready for good and every
// search failed with "collection not loaded" until the node was restarted
// (memory searches by vector answered 503 for as long as it ran).
func TestCollectionReleasedUnderTheStoreIsLoadedAgain(t *testing.T) {
	t.Parallel()
	addr := serverAddr(t)
	prefix := testPrefix(t, addr)
	s := newStore(t, milvus.Config{Addr: addr, Prefix: prefix})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	v := []float32{1, 0, 0}
	if err := s.Upsert(ctx, "c", []vectorstore.Item{{ID: "a", Vector: v}}); err != nil {
		t.Fatal(err)
	}
	if hits, err := s.Search(ctx, "c", vectorstore.Query{Vector: v, K: 1}); err != nil || len(hits) != 1 {
		t.Fatalf("Search: %v %v", hitIDs(hits), err)
	}

	// A Session Store's delete waits for a query, which needs the collection loaded too.
	session := newStore(t, milvus.Config{Addr: addr, Prefix: prefix, Consistency: milvus.Session})
	if hits, err := session.Search(ctx, "c", vectorstore.Query{Vector: v, K: 1}); err != nil || len(hits) != 1 {
		t.Fatalf("Search at Session: %v %v", hitIDs(hits), err)
	}

	raw, err := client.NewClient(ctx, client.Config{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := raw.ReleaseCollection(ctx, prefix+"c"); err != nil {
		t.Fatal(err)
	}

	if hits, err := s.Search(ctx, "c", vectorstore.Query{Vector: v, K: 1}); err != nil || !slices.Equal(hitIDs(hits), []string{"a"}) {
		t.Errorf("Search of the released collection: %v %v, want [a]", hitIDs(hits), err)
	}
	if err := s.Upsert(ctx, "c", []vectorstore.Item{{ID: "b", Vector: []float32{0, 1, 0}}}); err != nil {
		t.Errorf("Upsert: %v", err)
	}
	if hits, err := s.Search(ctx, "c", vectorstore.Query{Vector: []float32{0, 1, 0}, K: 1}); err != nil || !slices.Equal(hitIDs(hits), []string{"b"}) {
		t.Errorf("Search after the Upsert: %v %v, want [b]", hitIDs(hits), err)
	}
	if err := raw.ReleaseCollection(ctx, prefix+"c"); err != nil {
		t.Fatal(err)
	}
	if err := session.Delete(ctx, "c", []string{"a"}); err != nil {
		t.Errorf("Delete at Session of the released collection: %v", err)
	}
	if hits, err := session.Search(ctx, "c", vectorstore.Query{Vector: v, K: 5}); err != nil || !slices.Equal(hitIDs(hits), []string{"b"}) {
		t.Errorf("Search after the Delete: %v %v, want [b]", hitIDs(hits), err)
	}
}
