package disclosure_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// countingEmbedder embeds with the offline hashing embedder and counts the texts it
// was given; it fails while fail is set.
type countingEmbedder struct {
	mu    sync.Mutex
	texts int
	fail  bool
}

func (c *countingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail {
		return nil, errors.New("embeddings endpoint down")
	}
	c.texts += len(texts)
	return llm.HashingEmbedder{}.Embed(ctx, texts)
}

// With an embedder, search_tools ranks by embeddings: the tools are embedded once per
// state of the catalog, the query at each search; when the embedder fails the search
// ranks with BM25 and says so.
func TestSearchRanksWithTheEmbedder(t *testing.T) {
	cat := &liveCatalog{}
	emb := &countingEmbedder{}
	d, err := disclosure.New(disclosure.Search, catalogTools(), disclosure.WithCatalog(cat), disclosure.WithEmbedder(emb))
	if err != nil {
		t.Fatal(err)
	}
	search := func(query string) []string {
		t.Helper()
		hits, ranking := d.Search(context.Background(), query, 1)
		if ranking != "embedding" {
			t.Fatalf("ranking = %q", ranking)
		}
		var n []string
		for _, h := range hits {
			n = append(n, h.Name)
		}
		return n
	}
	if got := search("show the commit history of the repository"); !slices.Equal(got, []string{"git_log"}) {
		t.Errorf("history: %v", got)
	}
	if got := search("create a calendar event"); !slices.Equal(got, []string{"cal_create_event"}) {
		t.Errorf("event: %v", got)
	}
	if emb.texts != 4+2 {
		t.Errorf("embedded %d texts, want the 4 tools once and 2 queries", emb.texts)
	}
	cat.set(weatherTools()...)
	if got := search("weather forecast for a city"); !slices.Equal(got, []string{"weather__forecast"}) {
		t.Errorf("after the catalog changed: %v", got)
	}
	if emb.texts != 6+6+1 {
		t.Errorf("embedded %d texts, want the 6 tools again and 1 more query", emb.texts)
	}
	emb.fail = true
	res, err := callNamed(t, d, actors.ToolSearchTools, `{"query":"weather alerts of a region","limit":1}`)
	if err != nil || !strings.Contains(res, `"loaded":["weather__alerts"]`) || !strings.Contains(res, "ranked by bm25 (the embedder failed: embeddings endpoint down)") {
		t.Errorf("with the embedder down: %s, %v", res, err)
	}
}
