package knowledge_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
)

// zeroEmbedder gives every text a zero vector: the chunks it embeds have none.
type zeroEmbedder struct{ dim int }

func (e zeroEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i := range out {
		out[i] = make([]float32, e.dim)
	}
	return out, nil
}

// A hybrid search of a knowledge base whose chunks have no vector (its passage
// embedder found no direction in them) has no vector half: it ranks by BM25
// alone, as when the query embedder fails, and says so, so that a user or an
// agent does not read a keyword ranking as a hybrid one.
func TestHybridSearchOfABaseWithoutVectorsSaysSo(t *testing.T) {
	f := newFixture(t, func(c *knowledge.Config) {
		c.Embedder, c.QueryEmbedder = zeroEmbedder{dim: 8}, llm.HashingEmbedder{}
	})
	b := f.base(t, "docs")
	addText(t, b, "backups.md", "# Backups\n\nStop the node and copy the data directory.\n")
	addText(t, b, "ports.md", "# Ports\n\nThe node listens for HTTP on port 8080.\n")
	for _, fusion := range []knowledge.Fusion{knowledge.FusionConvex, knowledge.FusionRRF} {
		res := search(t, b, knowledge.Query{Text: "copy the data", Fusion: fusion})
		if len(res.Hits) == 0 || res.Hits[0].Source != "backups.md" {
			t.Fatalf("fusion %q: hits %v, want backups.md first", fusion, sources(res.Hits))
		}
		if !hasNote(res.Notes, "BM25 alone") || !hasNote(res.Notes, "no vectors") {
			t.Errorf("fusion %q: notes %q, want one saying the chunks have no vectors and the search ranked by BM25 alone", fusion, res.Notes)
		}
	}
	// A vector search has no list at all, and says why too.
	res := search(t, b, knowledge.Query{Text: "copy the data", Mode: knowledge.ModeVector})
	if len(res.Hits) != 0 || !hasNote(res.Notes, "no vectors") {
		t.Errorf("vector search: hits %v, notes %q: want none, and a note saying the chunks have no vectors", sources(res.Hits), res.Notes)
	}
}

func hasNote(notes []string, part string) bool {
	for _, n := range notes {
		if strings.Contains(n, part) {
			return true
		}
	}
	return false
}
