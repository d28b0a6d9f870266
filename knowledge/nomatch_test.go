package knowledge_test

import (
	"context"
	"slices"
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

// A hybrid search none of whose words (common words aside) the knowledge base
// holds is ranked by its vector half alone, min-max normalised over the
// candidates: its best hit scores Alpha (0.5, 0.2 with the offline hashing
// embedder) and its worst 0 whether or not any answers the query, as a
// question in another language does when its best hit is the answer. The
// scores cannot say that nothing matched; a note does, so that a user or an
// agent reading the hits knows that no word of the query was found and, with
// the hashing embedder, that the ranking is hash collisions.
func TestHybridSearchWithoutAWordOfTheQuerySaysSo(t *testing.T) {
	f := newFixture(t)
	b := f.base(t, "docs")
	addText(t, b, "ports.md", "# Ports\n\nThe node listens for HTTP on port 8080.\n")
	addText(t, b, "backups.md", "# Backups\n\nStop the node and copy the data directory.\n")
	for _, text := range []string{"zzqx wvut florp", "the of and", "?! ... ;"} {
		for _, fusion := range []knowledge.Fusion{knowledge.FusionConvex, knowledge.FusionRRF} {
			res := search(t, b, knowledge.Query{Text: text, Fusion: fusion})
			// An agent's evidence reads the note as it begins, and these words in
			// the same note (actors/gather.go's foundByMeaning): the fixture's
			// embedder stands for a semantic one.
			if len(res.Hits) > 0 && !slices.ContainsFunc(res.Notes, func(n string) bool {
				return strings.HasPrefix(n, "no word of the query is in the knowledge base") && strings.Contains(n, "ranked by meaning alone")
			}) {
				t.Errorf("%q, fusion %q: hits %v scored %v, notes %q: want a note that no word of the query is in the knowledge base",
					text, fusion, sources(res.Hits), scores(res.Hits), res.Notes)
			}
		}
	}
	// A query that shares a word has no such note.
	res := search(t, b, knowledge.Query{Text: "copy the data"})
	if hasNote(res.Notes, "no word of the query") {
		t.Errorf("a matching query: notes %q", res.Notes)
	}
}

func scores(hits []knowledge.Hit) []float64 {
	var out []float64
	for _, h := range hits {
		out = append(out, h.Score)
	}
	return out
}

// With the offline hashing embedder a query vector is near a passage by the
// words they share, and by hash collisions: a hybrid search none of whose words
// (common words aside) the knowledge base holds has only collisions to rank, so
// it finds nothing, and says why, rather than answering passages that do not
// match (which a session would take as the task's evidence). With a semantic
// embedder such a search answers (a question in another language finds its
// answer by meaning), with its note.
func TestHybridSearchWithTheHashingEmbedderAndNoWordFindsNothing(t *testing.T) {
	f := newFixture(t, func(c *knowledge.Config) { c.Embedder = llm.HashingEmbedder{} })
	b := f.base(t, "docs")
	addText(t, b, "ports.md", "# Ports\n\nThe node listens for HTTP on port 8080.\n")
	addText(t, b, "backups.md", "# Backups\n\nStop the node and copy the data directory.\n")
	for _, text := range []string{"zzqx wvut florp", "the of and"} {
		for _, fusion := range []knowledge.Fusion{knowledge.FusionConvex, knowledge.FusionRRF, knowledge.FusionWeightedRRF} {
			res := search(t, b, knowledge.Query{Text: text, Fusion: fusion})
			if len(res.Hits) != 0 || !hasNote(res.Notes, "no word of the query") {
				t.Errorf("%q, fusion %q: hits %v scored %v, notes %q: want none, and a note saying why", text, fusion, sources(res.Hits), scores(res.Hits), res.Notes)
			}
		}
	}
	res := search(t, b, knowledge.Query{Text: "copy the data"})
	if len(res.Hits) == 0 || res.Hits[0].Source != "backups.md" || len(res.Notes) != 0 {
		t.Errorf("a matching query: hits %v, notes %q", sources(res.Hits), res.Notes)
	}
}

// lexicalWrapper wraps an embedder as a cache, a metric or a recorder does, and
// passes on whether it is lexical.
type lexicalWrapper struct{ llm.Embedder }

func (w lexicalWrapper) Lexical() bool { return llm.IsLexical(w.Embedder) }

// Whether the embedders are lexical is a property they state (llm.IsLexical), not
// their type: the hashing embedder behind a pointer, or wrapped by an embedder
// that passes the question on, is the hashing embedder, and a hybrid search that
// found no word of its query finds nothing with it as with it bare (a type
// assertion on llm.HashingEmbedder took both for a semantic embedder and
// answered passages near by hash collisions), with the hashing vector share.
func TestHybridSearchWithAWrappedHashingEmbedderAndNoWordFindsNothing(t *testing.T) {
	open := func(emb llm.Embedder) *knowledge.Base {
		b := newFixture(t, func(c *knowledge.Config) { c.Embedder = emb }).base(t, "docs")
		addText(t, b, "ports.md", "# Ports\n\nThe node listens for HTTP on port 8080.\n")
		addText(t, b, "backups.md", "# Backups\n\nStop the node and copy the data directory.\n")
		return b
	}
	const matching = "copy the data directory of the node"
	bare := scores(search(t, open(llm.HashingEmbedder{}), knowledge.Query{Text: matching}).Hits)
	for name, emb := range map[string]llm.Embedder{
		"pointer": &llm.HashingEmbedder{},
		"wrapped": lexicalWrapper{llm.HashingEmbedder{}},
	} {
		b := open(emb)
		res := search(t, b, knowledge.Query{Text: "zzqx wvut florp"})
		if len(res.Hits) != 0 || !hasNote(res.Notes, "no word of the query") {
			t.Errorf("%s: hits %v scored %v, notes %q: want none, and a note saying why", name, sources(res.Hits), scores(res.Hits), res.Notes)
		}
		// A matching query scores as with the bare embedder: the same vector share.
		if got := scores(search(t, b, knowledge.Query{Text: matching}).Hits); !slices.Equal(got, bare) {
			t.Errorf("%s: a matching query scored %v, with the bare hashing embedder %v", name, got, bare)
		}
	}
	if !llm.IsLexical(llm.HashingEmbedder{}) || llm.IsLexical(lexicalWrapper{zeroEmbedder{dim: 8}}) {
		t.Error("IsLexical: want the hashing embedder lexical and a wrapped other embedder not")
	}
}

// With the hashing embedder a hybrid search that found no word of its query
// still has the words of HyDE's hypothetical answer: a question in another
// language whose hypothetical answer shares words with a passage finds it by
// them (as a rewrite of multi-query would, by BM25), while the query's own
// vectors, near by hash collisions only, rank nothing. An answer that shares no
// word either finds nothing.
func TestHybridSearchWithTheHashingEmbedderAndNoWordKeepsHyDE(t *testing.T) {
	for _, tc := range []struct {
		passage string
		want    []string
	}{
		{"Stop the node, then copy its data directory somewhere safe.", []string{"backups.md"}},
		{"Qwzzy plorf snarg.", nil},
	} {
		model := scripted(t, "unused rewrite", tc.passage)
		f := newFixture(t, func(c *knowledge.Config) { c.Model, c.Embedder = model, llm.HashingEmbedder{} })
		b := f.base(t, "docs")
		addText(t, b, "ports.md", "# Ports\n\nThe node listens for HTTP on port 8080.\n")
		addText(t, b, "backups.md", "# Backups\n\nStop the node and copy the data directory.\n")
		res := search(t, b, knowledge.Query{Text: "comment sauvegarder ?", HyDE: true})
		if got := sources(res.Hits); res.HyDE != tc.passage || len(got) == 0 && tc.want != nil || len(got) > 0 && (tc.want == nil || got[0] != tc.want[0]) ||
			!hasNote(res.Notes, "no word of the query") {
			t.Errorf("HyDE %q: hits %v scored %v, notes %q: want %v first, and the note", res.HyDE, got, scores(res.Hits), res.Notes, tc.want)
		}
	}
}
