package knowledge_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
)

// TestHybridSearchAnswersByBM25WhenTheQueryEmbedderFails: an embeddings server
// answering 500 to every query leaves a hybrid search its BM25 half, with a
// note saying the vector half was missing; a vector search fails saying why.
func TestHybridSearchAnswersByBM25WhenTheQueryEmbedderFails(t *testing.T) {
	srv := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply {
		return openaitest.Error(500, "the embedding model crashed")
	})
	qe, err := openai.NewEmbedder(openai.EmbedderConfig{Provider: "fake", BaseURL: srv.URL, Model: "e5-query"})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(c *knowledge.Config) { c.QueryEmbedder, c.EmbedAttempts = qe, 2 })
	b := f.base(t, "docs")
	addText(t, b, "ops.md", "# Operations\n\n## Backups\n\nCopy the data directory to take a backup of PAY-4013.")
	addText(t, b, "faq.md", "# FAQ\n\n## Ports\n\nThe node serves HTTP on port 8080.")

	for _, q := range []knowledge.Query{{Text: "backup PAY-4013"}, {Text: "backup PAY-4013", Mode: knowledge.ModeHybrid, Fusion: knowledge.FusionRRF}} {
		res, err := b.Search(testCtx(t), q)
		if err != nil {
			t.Fatalf("hybrid search %+v with the query embedder down: %v", q, err)
		}
		if len(res.Hits) == 0 || res.Hits[0].Source != "ops.md" {
			t.Fatalf("hybrid search %+v: hits %v, want ops.md first", q, sources(res.Hits))
		}
		bm25 := search(t, b, knowledge.Query{Text: q.Text, Mode: knowledge.ModeBM25})
		if strings.Join(sources(res.Hits), ",") != strings.Join(sources(bm25.Hits), ",") {
			t.Fatalf("hybrid search %+v: %v, BM25 alone %v", q, sources(res.Hits), sources(bm25.Hits))
		}
		if !strings.Contains(strings.Join(res.Notes, "\n"), "query embedder failed") {
			t.Fatalf("hybrid search %+v: notes %q, want one saying the query embedder failed", q, res.Notes)
		}
	}
	if _, err := b.Search(testCtx(t), knowledge.Query{Text: "backup", Mode: knowledge.ModeVector}); err == nil || !errors.Is(err, knowledge.ErrEmbedder) {
		t.Fatalf("vector search with the query embedder down: %v, want an error wrapping ErrEmbedder", err)
	}
	ans, err := b.Ask(testCtx(t), "How do I take a backup?", knowledge.AskOptions{})
	if err != nil || len(ans.Hits) == 0 {
		t.Fatalf("ask with the query embedder down: %+v, %v", ans, err)
	}
}
