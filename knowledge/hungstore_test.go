package knowledge_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/vectorstore"
)

// hungStore is a vector store that stops answering (a Milvus frozen, a proxy
// that black-holes its packets) while hung: its calls wait until released or
// their ctx ends.
type hungStore struct {
	vectorstore.Store
	mu      sync.Mutex
	hung    chan struct{} // closed to release; nil: answering
	entered chan struct{}
}

func (s *hungStore) hang() {
	s.mu.Lock()
	s.hung = make(chan struct{})
	s.entered = make(chan struct{}, 100)
	s.mu.Unlock()
}
func (s *hungStore) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hung != nil {
		close(s.hung)
		s.hung = nil
	}
}

func (s *hungStore) wait(ctx context.Context) error {
	s.mu.Lock()
	h, e := s.hung, s.entered
	s.mu.Unlock()
	if h == nil {
		return nil
	}
	e <- struct{}{}
	select {
	case <-h:
		return nil // it answers again
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *hungStore) Upsert(ctx context.Context, coll string, items []vectorstore.Item) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.Store.Upsert(ctx, coll, items)
}

func (s *hungStore) Delete(ctx context.Context, coll string, ids []string) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.Store.Delete(ctx, coll, ids)
}

func (s *hungStore) Search(ctx context.Context, coll string, q vectorstore.Query) ([]vectorstore.Hit, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.Store.Search(ctx, coll, q)
}

// A vector store that stops answering (a Milvus frozen, a proxy that drops its
// packets: each call then waits out the store's request timeout, 30 s for
// Milvus) holds up only what waits for it: a search of the base — even by BM25,
// which needs no store — and the ingestion of another document answer from the
// log and the fold meanwhile, and the vectors reach the store once it answers.
// Before, the store was written under the base's lock, so every search and
// write of the base waited for the hung call.
func TestAHungVectorStoreDoesNotHoldUpTheBase(t *testing.T) {
	store := &hungStore{Store: openStore(t, "")}
	clock := newTestClock()
	f := newFixture(t, func(c *knowledge.Config) {
		c.Vectors = store
		c.Now = clock.Now
	})
	b := f.base(t, "docs")
	addText(t, b, "a.md", "The lighthouse keeper logs the weather.")
	store.hang()
	defer store.release()
	added := make(chan error, 1)
	go func() {
		_, err := b.AddText(testCtx(t), "b.md", "Tide tables for the harbour.", "")
		added <- err
	}()
	<-store.entered // the write's sync waits for the store
	searched := make(chan error, 1)
	go func() {
		for _, mode := range []knowledge.Mode{knowledge.ModeBM25, knowledge.ModeHybrid} {
			res, err := b.Search(testCtx(t), knowledge.Query{Text: "lighthouse weather", Mode: mode, Limit: 1})
			if err == nil && (len(res.Hits) != 1 || res.Hits[0].Source != "a.md") {
				err = fmt.Errorf("%s search: hits %v, want a.md", mode, sources(res.Hits))
			}
			if err != nil {
				searched <- err
				return
			}
		}
		_, err := b.AddText(testCtx(t), "c.md", "Ferry timetables.", "")
		searched <- err
	}()
	select {
	case err := <-searched:
		if err != nil {
			t.Errorf("while the store hangs: %v", err)
		}
	case <-time.After(20 * time.Second): // a deadline, not a measure: the store hangs until released
		t.Fatal("searches and writes of the base wait for the hung vector store")
	}
	store.release()
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Minute) // past any retry wait
	if err := b.Refresh(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if ids := storeIDs(t, store.Store, "docs", 256); len(ids) != 3 {
		t.Errorf("the store holds %d vectors once it answers, want 3", len(ids))
	}
}
