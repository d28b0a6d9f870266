package disclosure

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/troupe-run/troupe/llm"
)

// WithEmbedder makes search_tools rank tools by the cosine similarity of the query's
// vector to each tool's (its name, description and group, as BM25 indexes them),
// instead of BM25. The tools are embedded at the first search over a state of the
// catalog and kept until it changes. When the embedder fails, the search ranks with
// BM25 and its answer says so: the answer is recorded either way, so a session
// replays the same.
func WithEmbedder(e llm.Embedder) Option {
	return func(d *Disclosure) { d.embedder = e }
}

// vectors are the embeddings of a view's grouped tools, made on demand.
type vectors struct {
	mu   sync.Mutex
	vecs [][]float32 // nil until made; a failure is tried again at the next search
}

// embeddings returns the vectors of v's grouped tools (v.names, v.docs), embedding
// them on the first call that succeeds.
func (v *view) embeddings(ctx context.Context, e llm.Embedder) ([][]float32, error) {
	v.vectors.mu.Lock()
	defer v.vectors.mu.Unlock()
	if v.vectors.vecs != nil || len(v.docs) == 0 {
		return v.vectors.vecs, nil
	}
	vecs, err := e.Embed(ctx, v.docs)
	if err != nil {
		return nil, err
	}
	if len(vecs) != len(v.docs) {
		return nil, fmt.Errorf("the embedder returned %d vectors for %d tools", len(vecs), len(v.docs))
	}
	v.vectors.vecs = vecs
	return vecs, nil
}

// searchEmbedded ranks v's grouped tools for query by cosine similarity, best first,
// at most k, ties to the name that sorts first; only positive similarities count.
func (v *view) searchEmbedded(ctx context.Context, e llm.Embedder, query string, k int) ([]Hit, error) {
	vecs, err := v.embeddings(ctx, e)
	if err != nil {
		return nil, err
	}
	q, err := e.Embed(ctx, []string{query})
	if err != nil {
		return nil, err
	}
	if len(q) != 1 {
		return nil, fmt.Errorf("the embedder returned %d vectors for one query", len(q))
	}
	var hits []Hit
	for i, vec := range vecs {
		if s := cosine(q[0], vec); s > 0 {
			hits = append(hits, Hit{Name: v.names[i], Score: s})
		}
	}
	slices.SortFunc(hits, byScore)
	return hits[:min(k, len(hits))], nil
}

func cosine(a, b []float32) float64 {
	if len(a) != len(b) {
		return 0
	}
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}
