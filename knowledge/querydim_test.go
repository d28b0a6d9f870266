package knowledge_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
)

// switchingEmbedder is the hashing embedder until other is set: then it answers
// other's vectors, as an embedding server switched to another model does.
type switchingEmbedder struct {
	llm.HashingEmbedder
	other atomic.Pointer[llm.HashingEmbedder]
}

func (e *switchingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if o := e.other.Load(); o != nil {
		return o.Embed(ctx, texts)
	}
	return e.HashingEmbedder.Embed(ctx, texts)
}

// The node's query embedder starts answering vectors of another dimension than
// the knowledge base's (its server was switched to another model): that is the
// embedder's fault, not the request's. A hybrid search answers by BM25 and says
// so, as it does when the embedder fails; a vector search fails with
// ErrDimension (ErrEmbedder: a 409, and the agent's tool does not blame its
// arguments), not ErrInvalid. Before, both failed with ErrInvalid: an HTTP 400,
// and the retrieval tool told the model its arguments were wrong.
func TestSearchWhenTheQueryEmbedderChangesDimension(t *testing.T) {
	emb := &switchingEmbedder{}
	f := newFixture(t, func(c *knowledge.Config) { c.Embedder, c.QueryEmbedder = emb, emb })
	b := f.base(t, "docs")
	addText(t, b, "a.md", "The lighthouse keeper logs the weather.")
	addText(t, b, "b.md", "Tide tables for the harbour.")
	emb.other.Store(&llm.HashingEmbedder{Dim: 64})

	res, err := b.Search(testCtx(t), knowledge.Query{Text: "lighthouse weather"})
	if err != nil {
		t.Fatalf("hybrid search with a query of another dimension: %v; want BM25's answer", err)
	}
	if got := sources(res.Hits); len(got) == 0 || got[0] != "a.md" {
		t.Errorf("hybrid search: hits %v, want a.md first", got)
	}
	if !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "BM25 alone") && strings.Contains(n, "dimension") }) {
		t.Errorf("hybrid search: notes %q, want one saying it ranked by BM25 alone, and why", res.Notes)
	}
	_, err = b.Search(testCtx(t), knowledge.Query{Text: "lighthouse weather", Mode: knowledge.ModeVector})
	if !errors.Is(err, knowledge.ErrDimension) || errors.Is(err, knowledge.ErrInvalid) {
		t.Errorf("vector search with a query of another dimension: %v; want ErrDimension, not ErrInvalid", err)
	}
}
