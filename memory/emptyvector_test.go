package memory_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
)

// emptyEmbedder answers an empty vector for every text while broken is set (an
// embeddings server, or a proxy in front of it, answering 200 with
// "embedding": []), and embeds as the offline embedder does otherwise.
type emptyEmbedder struct{ broken atomic.Bool }

func (e *emptyEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if e.broken.Load() {
		return make([][]float32, len(texts)), nil
	}
	return llm.HashingEmbedder{}.Embed(ctx, texts)
}

// An embedder that answers empty vectors is failing, not saying that the texts have
// none: a write fails, naming it, and writes nothing (sent again once the
// embedder is back, it is stored with its vector), and a hybrid search ranks by
// keyword and says so. Before, each memory written meanwhile was stored without a
// vector for good — found by keyword only, with no note, and never embedded again
// once the embedder was back — as a text of no word is with the offline embedder.
func TestAnEmbedderAnsweringEmptyVectorsFailsTheWrite(t *testing.T) {
	e := &emptyEmbedder{}
	f := newFixture(t, func(c *memory.Config) { c.Embedder = e })
	ns := f.ns(t, "user:alice")
	add(t, ns, "", memory.AddRequest{Tier: memory.Semantic, Content: "Alice lives in Lisbon."})

	e.broken.Store(true)
	before := ns.Stats().Seq
	_, err := ns.Add(testCtx(t), "k", []memory.AddRequest{{Tier: memory.Semantic, Content: "Bob sails boats on the Tagus."}})
	if err == nil || !strings.Contains(err.Error(), "empty vector") {
		t.Fatalf("Add while the embedder answers empty vectors: %v, want an error naming the empty vector", err)
	}
	if after := ns.Stats().Seq; after != before {
		t.Fatalf("the failed Add appended events: seq %d → %d", before, after)
	}
	res, note, err := ns.SearchNoted(testCtx(t), memory.Query{Text: "Alice Lisbon"})
	if err != nil || len(res) == 0 || !strings.Contains(note, "query embedder") {
		t.Fatalf("hybrid search while the embedder answers empty vectors: %d results, note %q, %v; want the keyword hits and a note", len(res), note, err)
	}

	e.broken.Store(false)
	ids := add(t, ns, "k", memory.AddRequest{Tier: memory.Semantic, Content: "Bob sails boats on the Tagus."})
	m, ok := ns.Get(ids[0].ID)
	if !ok || len(m.Vector) == 0 {
		t.Fatalf("the memory written once the embedder is back: %+v, want it with its vector", m)
	}
}
