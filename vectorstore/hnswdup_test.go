package vectorstore_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/troupe-run/troupe/vectorstore"
)

// Many items of one vector (a footer or a licence notice every document of a
// knowledge base repeats, embedded alike) must not wall the graph in: each copy
// would link only to other copies, the entry point or the greedy descent would land
// among them, and a search for anything else would find its neighbours no more.
// With 1,000 copies among 4,000 other items, recall@10 was 0.80 (0.46 with 3,000).
// And a search for the copies' vector still finds as many of them as it asks for,
// though the graph links each copy to one other only.
func TestHNSWRecallWithDuplicates(t *testing.T) {
	const n, dim, k = 4000, 64, 10
	items, queries := recallData(n, dim, 7)
	rng := rand.New(rand.NewPCG(3, 3))
	footer := make([]float32, dim)
	for i := range footer {
		footer[i] = float32(rng.NormFloat64())
	}
	for _, dups := range []int{1000, 3000} {
		var all []vectorstore.Item
		d := 0
		for i, it := range items {
			all = append(all, it)
			if i%(n/dups) == 0 && d < dups {
				all = append(all, vectorstore.Item{ID: fmt.Sprintf("dup%05d", d), Vector: footer, Metadata: map[string]string{"shard": "9"}})
				d++
			}
		}
		ann := open(t, vectorstore.Config{Index: vectorstore.IndexHNSW})
		exact := open(t, vectorstore.Config{})
		upsertAll(t, ann, "r", all)
		upsertAll(t, exact, "r", all)
		for _, filter := range []map[string]string{nil, {"shard": "2"}} {
			r := recall(t, ann, exact, "r", queries, k, filter)
			t.Logf("%d copies of one vector among %d items, filter %v: recall@%d = %.3f", d, len(all), filter, k, r)
			if r < 0.95 {
				t.Errorf("%d copies of one vector among %d items, filter %v: recall@%d = %.3f, want >= 0.95", d, len(all), filter, k, r)
			}
		}
		hits, err := ann.Search(t.Context(), "r", vectorstore.Query{Vector: footer, K: 5 * k})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hits {
			if h.Score < 0.999 {
				t.Errorf("%d copies: a search for their vector found %s at %.3f", d, h.ID, h.Score)
			}
		}
		if len(hits) != 5*k {
			t.Errorf("%d copies: %d hits, want %d", d, len(hits), 5*k)
		}
	}
}
