package node_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/vectorstore"
)

// outageStore is an embedded vector store that can be taken down, and that refuses
// every batch holding an item whose text contains "POISON".
type outageStore struct {
	vectorstore.Store
	down atomic.Bool
}

var errOutage = errors.New("vector store unavailable (test)")

func (s *outageStore) Upsert(ctx context.Context, coll string, items []vectorstore.Item) error {
	if s.down.Load() {
		return errOutage
	}
	for _, it := range items {
		if strings.Contains(it.Text, "POISON") {
			return fmt.Errorf("%w: item %q (test)", vectorstore.ErrRefused, it.ID)
		}
	}
	return s.Store.Upsert(ctx, coll, items)
}

func (s *outageStore) Delete(ctx context.Context, coll string, ids []string) error {
	if s.down.Load() {
		return errOutage
	}
	return s.Store.Delete(ctx, coll, ids)
}

func (s *outageStore) Search(ctx context.Context, coll string, q vectorstore.Query) ([]vectorstore.Hit, error) {
	if s.down.Load() {
		return nil, errOutage
	}
	return s.Store.Search(ctx, coll, q)
}

// metric returns the value of one series on the node's /metrics ("" when absent).
func (mn memoryNode) metric(t *testing.T, series string) string {
	t.Helper()
	code, body := mn.do(t, http.MethodGet, "/metrics", "", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// /metrics counts the memories' vectors that wait for the vector store: the count
// rises while the store is down and falls once it takes them; a vector the store
// refuses is counted as parked, and waits for nothing.
func TestVectorMetricsDuringOutage(t *testing.T) {
	inner, err := vectorstore.Open(vectorstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inner.Close() })
	store := &outageStore{Store: inner}
	mn := newMemoryNode(t, node.Config{Memory: &memory.Config{Vectors: store}})
	const waiting, parked = `troupe_vectors_waiting{kind="memory"}`, `troupe_vectors_parked_total{kind="memory"}`
	if w, p := mn.metric(t, waiting), mn.metric(t, parked); w != "0" || p != "0" {
		t.Fatalf("before any write: waiting %q, parked %q; want 0 and 0", w, p)
	}
	store.down.Store(true)
	mn.mustPost(t, `[{"namespace":"user:fay","tier":"semantic","content":"Fay sails a yawl"},{"namespace":"user:fay","tier":"semantic","content":"Fay lives in Brest"}]`)
	if w := mn.metric(t, waiting); w != "2" {
		t.Errorf("while the store is down: waiting %q, want 2", w)
	}
	store.down.Store(false)
	code, body := mn.do(t, http.MethodGet, "/v1/memories/search?namespace=user:fay&q=yawl&mode=vector", "", nil)
	if code != http.StatusOK {
		t.Fatalf("vector search once the store is back: %d %s", code, body)
	}
	if w := mn.metric(t, waiting); w != "0" {
		t.Errorf("once the store is back: waiting %q, want 0", w)
	}
	mn.mustPost(t, `[{"namespace":"user:fay","tier":"semantic","content":"POISON Fay keeps goats"},{"namespace":"user:fay","tier":"semantic","content":"Fay rows at dawn"}]`)
	if w, p := mn.metric(t, waiting), mn.metric(t, parked); w != "0" || p != "1" {
		t.Errorf("after a write the store refuses in part: waiting %q, parked %q; want 0 and 1", w, p)
	}
}

// Vectors left behind by an outage reach the store once it is back, without a
// write or a search of their namespace: the node catches them up in the background.
func TestVectorsCatchUpAfterAnOutageWithoutTraffic(t *testing.T) {
	inner, err := vectorstore.Open(vectorstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inner.Close() })
	store := &outageStore{Store: inner}
	mn := newMemoryNode(t, node.Config{Memory: &memory.Config{Vectors: store}})
	const waiting = `troupe_vectors_waiting{kind="memory"}`
	store.down.Store(true)
	mn.mustPost(t, `[{"namespace":"user:gus","tier":"semantic","content":"Gus flies kites"},{"namespace":"user:gus","tier":"semantic","content":"Gus lives in Hull"}]`)
	if w := mn.metric(t, waiting); w != "2" {
		t.Fatalf("while the store is down: waiting %q, want 2", w)
	}
	store.down.Store(false)
	deadline := time.Now().Add(45 * time.Second)
	for mn.metric(t, waiting) != "0" {
		if time.Now().After(deadline) {
			t.Fatalf("the vectors never reached the store: waiting %q", mn.metric(t, waiting))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
