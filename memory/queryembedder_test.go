package memory_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/memory"
)

// TestHybridSearchRanksByKeywordWhenTheQueryEmbedderFails: an embeddings server
// answering 500 to every query leaves a hybrid search its keyword and graph
// candidates, with a note saying the vectors were missing; a vector search fails.
func TestHybridSearchRanksByKeywordWhenTheQueryEmbedderFails(t *testing.T) {
	srv := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply {
		return openaitest.Error(500, "the embedding model crashed")
	})
	qe, err := openai.NewEmbedder(openai.EmbedderConfig{Provider: "fake", BaseURL: srv.URL, Model: "e5-query"})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(c *memory.Config) { c.QueryEmbedder = qe })
	ns := f.ns(t, "user:alice")
	add(t, ns, "", memory.AddRequest{Tier: memory.Semantic, Content: "Alice's locker code is PAY-4013."},
		memory.AddRequest{Tier: memory.Semantic, Content: "Bob prefers tea in the morning."})

	res, note, err := ns.SearchNoted(testCtx(t), memory.Query{Text: "locker code PAY-4013"})
	if err != nil {
		t.Fatalf("hybrid search with the query embedder down: %v", err)
	}
	if len(res) == 0 || !strings.Contains(res[0].Memory.Content, "PAY-4013") {
		t.Fatalf("hybrid search with the query embedder down: %+v, want the locker code first", res)
	}
	if !strings.Contains(note, "query embedder failed") {
		t.Fatalf("note %q, want one saying the query embedder failed", note)
	}
	if _, err := ns.Search(testCtx(t), memory.Query{Text: "locker", Mode: memory.ModeVector}); err == nil || !strings.Contains(err.Error(), "embedding the query") {
		t.Fatalf("vector search with the query embedder down: %v, want an error saying the query could not be embedded", err)
	}
}
