package memory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
)

// stuckEmbedder embeds as the offline embedder does once release is closed; until
// then each call waits (an embeddings server that hangs, or trickles its answer,
// until the client's timeout: two minutes by default).
type stuckEmbedder struct {
	entered chan struct{}
	once    sync.Once
	release chan struct{}
}

func (e *stuckEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	e.once.Do(func() { close(e.entered) })
	select {
	case <-e.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return llm.HashingEmbedder{}.Embed(ctx, texts)
}

// A search waiting for a slow query embedder holds up nothing else of its
// namespace: a write (whose own embedding is done), another search by keyword, the
// core blocks read into every task's prompt. Before, the search embedded its query
// holding the namespace's lock, so a hung embedder stopped every write, every
// search and the submission of every task of the namespace's agent for as long as
// the embedder's timeout.
func TestASearchWaitingForItsQueryEmbedderHoldsUpNothingElse(t *testing.T) {
	qe := &stuckEmbedder{entered: make(chan struct{}), release: make(chan struct{})}
	f := newFixture(t, func(c *memory.Config) { c.QueryEmbedder = qe })
	ns := f.ns(t, "user:alice")
	add(t, ns, "", memory.AddRequest{Tier: memory.Semantic, Content: "Alice lives in Lisbon."})

	searched := make(chan error, 1)
	go func() {
		_, err := ns.Search(context.Background(), memory.Query{Text: "where does Alice live"})
		searched <- err
	}()
	select {
	case <-qe.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the search did not reach its query embedder in 10 s")
	}
	defer close(qe.release)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := ns.Add(ctx, "", []memory.AddRequest{{Tier: memory.Semantic, Content: "Bob likes tea."}})
		if err == nil {
			_, err = ns.Search(ctx, memory.Query{Text: "tea", Mode: memory.ModeKeyword})
		}
		if err == nil {
			_ = ns.Blocks()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a write and a keyword search while a search waits for its query embedder: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a write, a keyword search and the blocks waited 5 s for another search's query embedder")
	}
}
