package knowledge_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
)

// hungEmbedder stands for an embeddings server that took the request and never
// answers: each call waits until its context ends, and counts itself.
type hungEmbedder struct{ calls chan struct{} }

func (h hungEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	h.calls <- struct{}{}
	<-ctx.Done()
	return nil, errors.Join(llm.ErrTransient, ctx.Err())
}

// A query embedder that stopped answering must not hold a hybrid search for its
// timeout once per attempt (the node's: 2 minutes, 5 attempts, so 10 minutes a
// search, and an agent's evidence before its first model call as long): past
// Config.HybridEmbedWait, by default, the search answers from its BM25 half with
// a note saying why, and the embedder's call is cancelled rather than left
// running. A vector search, with no other half, still waits for it: its caller's
// context ends it.
func TestHybridSearchDoesNotWaitOutAHungQueryEmbedder(t *testing.T) {
	hung := hungEmbedder{calls: make(chan struct{}, 16)}
	f := newFixture(t, func(c *knowledge.Config) { c.QueryEmbedder = hung })
	b := f.base(t, "docs")
	addText(t, b, "ops.md", "# Operations\n\n## Backups\n\nCopy the data directory to take a backup of PAY-4013.")
	addText(t, b, "faq.md", "# FAQ\n\n## Ports\n\nThe node serves HTTP on port 8080.")
	ctx := testCtx(t) // 60 s: six times the default wait
	res, err := b.Search(ctx, knowledge.Query{Text: "backup PAY-4013"})
	if err != nil {
		t.Fatalf("hybrid search with the query embedder hung: %v", err)
	}
	if len(res.Hits) == 0 || res.Hits[0].Source != "ops.md" {
		t.Fatalf("hits %v, want ops.md first", sources(res.Hits))
	}
	if notes := strings.Join(res.Notes, "\n"); !strings.Contains(notes, "query embedder failed") || !strings.Contains(notes, "HybridEmbedWait") {
		t.Fatalf("notes %q, want one saying the query embedder gave no answer within the wait", res.Notes)
	}
	if len(hung.calls) == 0 {
		t.Fatal("the query embedder was not called")
	}
	for len(hung.calls) > 0 { // the hybrid search's calls, before the vector search makes its own
		<-hung.calls
	}
	vctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := b.Search(vctx, knowledge.Query{Text: "backup", Mode: knowledge.ModeVector})
		done <- err
	}()
	<-hung.calls
	select {
	case err := <-done:
		t.Fatalf("the vector search ended before its context: %v", err)
	default:
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a vector search with its query embedder hung answered without error")
	}
}

// hangingEmbedder embeds with the hashing embedder until hang is set, then stands
// for a server that took the request and never answers; each call it takes while
// hung sends the deadline of its context.
type hangingEmbedder struct {
	hang      *atomic.Bool
	deadlines chan time.Time
}

func (h hangingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if !h.hang.Load() {
		return llm.HashingEmbedder{}.Embed(ctx, texts)
	}
	d, _ := ctx.Deadline()
	h.deadlines <- d
	<-ctx.Done()
	return nil, errors.Join(llm.ErrTransient, ctx.Err())
}

// HybridEmbedWait bounds a hybrid search's wait for all its vectors, not each
// embedding's: with HyDE the search embeds its hypothetical passage, then its
// query, and an embedder that stopped answering held it for the wait twice (20 s
// by default). Every embedding of one search ends by the deadline the first one
// began.
func TestHybridSearchWithHyDEWaitsOnceForAHungEmbedder(t *testing.T) {
	hang := &atomic.Bool{}
	emb := hangingEmbedder{hang: hang, deadlines: make(chan time.Time, 64)}
	model := scripted(t, "Copy the data directory to take a backup.", "Copy the data directory to take a backup.")
	f := newFixture(t, func(c *knowledge.Config) {
		c.Model, c.Embedder, c.QueryEmbedder, c.HybridEmbedWait = model, emb, emb, 50*time.Millisecond
	})
	b := f.base(t, "docs")
	addText(t, b, "ops.md", "# Operations\n\n## Backups\n\nCopy the data directory to take a backup of PAY-4013.")
	addText(t, b, "faq.md", "# FAQ\n\n## Ports\n\nThe node serves HTTP on port 8080.")
	hang.Store(true)
	res, err := b.Search(testCtx(t), knowledge.Query{Text: "backup PAY-4013", HyDE: true})
	if err != nil {
		t.Fatalf("hybrid search with HyDE and the embedder hung: %v", err)
	}
	if len(res.Hits) == 0 || res.Hits[0].Source != "ops.md" {
		t.Fatalf("hits %v, want ops.md first", sources(res.Hits))
	}
	if notes := strings.Join(res.Notes, "\n"); !strings.Contains(notes, "query embedder failed") {
		t.Fatalf("notes %q, want one saying the search ranked by BM25 alone", res.Notes)
	}
	close(emb.deadlines)
	var first time.Time
	for d := range emb.deadlines {
		switch {
		case d.IsZero():
			t.Fatal("an embedding of a hybrid search had no deadline")
		case first.IsZero():
			first = d
		case d.After(first):
			t.Fatalf("an embedding of the search was given until %v, %v after the first one's end: the search waited for its vectors more than HybridEmbedWait", d, d.Sub(first))
		}
	}
}
