//go:build review

package knowledge_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/pipelines/rag"
)

// scriptedEmbedder is the hashing embedder with a fault script: fail is asked
// before each call with the call's number (from 1) and its texts.
type scriptedEmbedder struct {
	llm.HashingEmbedder
	calls atomic.Int64
	fail  func(ctx context.Context, n int64, texts []string) ([][]float32, error)
}

func (e *scriptedEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	n := e.calls.Add(1)
	if e.fail != nil {
		if vs, err := e.fail(ctx, n, texts); vs != nil || err != nil {
			return vs, err
		}
	}
	return e.HashingEmbedder.Embed(ctx, texts)
}

func bigDoc(parts int, rev string) string {
	var sb strings.Builder
	sb.WriteString("# Big\n\n")
	for i := range parts {
		fmt.Fprintf(&sb, "## Section %d\n\nParagraph %d of revision %s about harbour tides and lighthouse number %d.\n\n", i, i, rev, i)
	}
	return sb.String()
}

// A document of hundreds of chunks whose embedder fails permanently midway
// writes nothing; the retry under the same key converges to exactly its chunks.
func TestReviewEmbedderFailsMidwayThenRetryConverges(t *testing.T) {
	emb := &scriptedEmbedder{}
	var failing atomic.Bool
	failing.Store(true)
	emb.fail = func(_ context.Context, n int64, _ []string) ([][]float32, error) {
		if failing.Load() && n == 5 {
			return nil, errors.New("500 internal server error")
		}
		return nil, nil
	}
	f := newFixture(t, func(c *knowledge.Config) {
		c.Embedder, c.QueryEmbedder = emb, emb
		c.Chunk = rag.ChunkOptions{MaxTokens: 30, OverlapTokens: -1}
		c.EmbedBatch = 16
	})
	b := f.base(t, "docs")
	doc := bigDoc(300, "r1")
	if _, err := b.AddText(testCtx(t), "big.md", doc, "k1"); !errors.Is(err, knowledge.ErrEmbedder) {
		t.Fatalf("midway failure: %v", err)
	}
	if n := len(events(t, f.log, "docs")); n != 0 {
		t.Fatalf("%d events after a failed ingestion", n)
	}
	if len(b.Documents()) != 0 {
		t.Fatalf("documents %v after a failed ingestion", b.Documents())
	}
	failing.Store(false)
	r, err := b.AddText(testCtx(t), "big.md", doc, "k1")
	if err != nil || r.Status != knowledge.StatusAdded || r.Chunks < 200 {
		t.Fatalf("retry: %+v %v", r, err)
	}
	r2, err := b.AddText(testCtx(t), "big.md", doc, "k1")
	if err != nil || r2 != r {
		t.Fatalf("retry again: %+v %v", r2, err)
	}
	if ids := storeIDs(t, f.store, "docs", 256); len(ids) != r.Chunks {
		t.Fatalf("store holds %d, want %d", len(ids), r.Chunks)
	}
	// Replace with a changed version: the old chunks leave both indexes.
	r3, err := b.AddText(testCtx(t), "big.md", bigDoc(250, "r2"), "k2")
	if err != nil || r3.Status != knowledge.StatusReplaced {
		t.Fatalf("replace: %+v %v", r3, err)
	}
	ids := storeIDs(t, f.store, "docs", 256)
	if len(ids) != r3.Chunks {
		t.Fatalf("store holds %d after replace, want %d", len(ids), r3.Chunks)
	}
	if res := search(t, b, knowledge.Query{Text: "r1", Mode: knowledge.ModeBM25, Limit: 50}); len(res.Hits) != 0 {
		t.Fatalf("BM25 finds the old revision: %d hits", len(res.Hits))
	}
	chunks, _ := b.Chunks("big.md")
	var want []string
	for _, c := range chunks {
		want = append(want, c.ChunkID)
	}
	slices.Sort(want)
	if !slices.Equal(want, ids) {
		t.Fatalf("store IDs differ from the fold's")
	}
}

// A search whose query embedder hangs does not hold up the ingestion of another
// document of the same base.
func TestReviewHangingQueryDoesNotBlockIngestion(t *testing.T) {
	release := make(chan struct{})
	emb := &scriptedEmbedder{}
	emb.fail = func(ctx context.Context, _ int64, texts []string) ([][]float32, error) {
		if len(texts) == 1 && texts[0] == "hang" {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return nil, nil
	}
	f := newFixture(t, func(c *knowledge.Config) { c.Embedder, c.QueryEmbedder = emb, emb })
	b := f.base(t, "docs")
	addText(t, b, "a.md", "alpha text")
	done := make(chan error, 1)
	go func() {
		_, err := b.Search(testCtx(t), knowledge.Query{Text: "hang"})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.AddText(ctx, "b.md", "beta text", ""); err != nil {
		t.Fatalf("ingestion while a query hangs: %v", err)
	}
	if _, err := b.Search(ctx, knowledge.Query{Text: "beta"}); err != nil {
		t.Fatalf("another search while a query hangs: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Remove during an ingestion of the same source.
func TestReviewRemoveDuringIngestion(t *testing.T) {
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	emb := &scriptedEmbedder{}
	emb.fail = func(ctx context.Context, _ int64, texts []string) ([][]float32, error) {
		if strings.Contains(texts[0], "second") {
			entered <- struct{}{}
			<-gate
		}
		return nil, nil
	}
	f := newFixture(t, func(c *knowledge.Config) { c.Embedder, c.QueryEmbedder = emb, emb })
	b := f.base(t, "docs")
	addText(t, b, "a.md", "first version")
	done := make(chan error, 1)
	go func() {
		_, err := b.AddText(testCtx(t), "a.md", "second version", "")
		done <- err
	}()
	<-entered
	if err := b.Remove(testCtx(t), "a.md", ""); err != nil {
		t.Fatal(err)
	}
	close(gate)
	err := <-done
	t.Logf("add after a concurrent remove: %v; documents %v", err, b.Documents())
	if ids := storeIDs(t, f.store, "docs", 256); len(ids) != len(b.Documents()) {
		t.Fatalf("store %v, docs %v", ids, b.Documents())
	}
}
