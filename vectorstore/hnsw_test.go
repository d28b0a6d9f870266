package vectorstore_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/troupe-run/troupe/vectorstore"
	"github.com/troupe-run/troupe/vectorstore/vectorstoretest"
)

// suiteHNSW makes every search of the suite's small collections go through the graph
// (ExactBelow < 0) with a beam wider than the collections, so the graph must find
// exactly what a scan finds: the suite checks exact rankings.
var suiteHNSW = vectorstore.HNSWConfig{M: 4, EfConstruction: 16, EfSearch: 1024, ExactBelow: -1}

func TestHNSWMemoryConformance(t *testing.T) {
	vectorstoretest.Run(t, vectorstoretest.Features{}, func(t *testing.T) vectorstore.Store {
		return open(t, vectorstore.Config{Index: vectorstore.IndexHNSW, HNSW: suiteHNSW})
	})
}

func TestHNSWFileConformance(t *testing.T) {
	for _, bc := range []struct {
		name string
		cfg  func(path string) vectorstore.Config
	}{
		{"default", func(path string) vectorstore.Config {
			return vectorstore.Config{Path: path, Index: vectorstore.IndexHNSW, HNSW: suiteHNSW}
		}},
		{"always-compacting", func(path string) vectorstore.Config {
			return vectorstore.Config{Path: path, NoSync: true, CompactRatio: 1.01, CompactMinBytes: 1,
				Index: vectorstore.IndexHNSW, HNSW: suiteHNSW}
		}},
	} {
		t.Run(bc.name, func(t *testing.T) {
			paths := make(map[vectorstore.Store]string)
			vectorstoretest.Run(t, vectorstoretest.Features{
				Reopen: func(t *testing.T, s vectorstore.Store) vectorstore.Store {
					if err := s.(*vectorstore.Embedded).Close(); err != nil {
						t.Fatalf("Close: %v", err)
					}
					re := open(t, bc.cfg(paths[s]))
					paths[re] = paths[s]
					return re
				},
			}, func(t *testing.T) vectorstore.Store {
				path := filepath.Join(t.TempDir(), "vectors.log")
				s := open(t, bc.cfg(path))
				paths[s] = path
				return s
			})
		})
	}
}

// recallData is clustered data with a metadata field that keeps a quarter of it.
func recallData(n, dim int, seed uint64) ([]vectorstore.Item, [][]float32) {
	rng := rand.New(rand.NewPCG(seed, 1))
	vecs, _ := vectorstoretest.Clustered(rng, n+100, dim, 50, 1.5, 0)
	items := make([]vectorstore.Item, n)
	for i := range items {
		items[i] = vectorstore.Item{ID: fmt.Sprintf("i%05d", i), Vector: vecs[i],
			Metadata: map[string]string{"shard": fmt.Sprint(i % 4)}}
	}
	return items, vecs[n:]
}

func upsertAll(t testing.TB, s vectorstore.Store, coll string, items []vectorstore.Item) {
	t.Helper()
	for i := 0; i < len(items); i += 500 {
		if err := s.Upsert(t.Context(), coll, items[i:min(i+500, len(items))]); err != nil {
			t.Fatal(err)
		}
	}
}

// recall is the share of the exact store's top k that the store under test returns,
// over all queries.
func recall(t *testing.T, got, exact vectorstore.Store, coll string, queries [][]float32, k int, filter map[string]string) float64 {
	t.Helper()
	found, total := 0, 0
	for _, q := range queries {
		want, err := exact.Search(t.Context(), coll, vectorstore.Query{Vector: q, K: k, Filter: filter})
		if err != nil {
			t.Fatal(err)
		}
		hits, err := got.Search(t.Context(), coll, vectorstore.Query{Vector: q, K: k, Filter: filter})
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) != len(want) {
			t.Fatalf("%d hits, want %d", len(hits), len(want))
		}
		in := make(map[string]bool)
		for _, h := range want {
			in[h.ID] = true
		}
		for i, h := range hits {
			if i > 0 && (hits[i-1].Score < h.Score || hits[i-1].Score == h.Score && hits[i-1].ID > h.ID) {
				t.Fatalf("hits out of order: %v then %v", hits[i-1].ID, h.ID)
			}
			if filter != nil && h.Metadata["shard"] != filter["shard"] {
				t.Fatalf("hit %s does not match the filter", h.ID)
			}
			if in[h.ID] {
				found++
			}
		}
		total += len(want)
	}
	return float64(found) / float64(total)
}

// TestHNSWRecall checks recall@10 against exact search on clustered data, with and
// without a filter, after inserts, then after deletes and replaces, then after a
// reopen that loads the saved graph.
func TestHNSWRecall(t *testing.T) {
	const n, dim, k = 4000, 64, 10
	items, queries := recallData(n, dim, 7)
	path := filepath.Join(t.TempDir(), "v.log")
	cfg := vectorstore.Config{Path: path, NoSync: true, Index: vectorstore.IndexHNSW,
		HNSW: vectorstore.HNSWConfig{ExactBelow: -1}}
	ann := open(t, cfg)
	exact := open(t, vectorstore.Config{})
	upsertAll(t, ann, "r", items)
	upsertAll(t, exact, "r", items)

	check := func(stage string) {
		t.Helper()
		for _, filter := range []map[string]string{nil, {"shard": "2"}} {
			r := recall(t, ann, exact, "r", queries, k, filter)
			t.Logf("%s, filter %v: recall@%d = %.3f", stage, filter, k, r)
			if r < 0.95 {
				t.Errorf("%s, filter %v: recall@%d = %.3f, want >= 0.95", stage, filter, k, r)
			}
		}
	}
	check("built")

	// Delete a third, replace a tenth with other vectors.
	var del []string
	for i := 0; i < n; i += 3 {
		del = append(del, items[i].ID)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	more, _ := vectorstoretest.Clustered(rng, n/10, dim, 50, 0.8, 0)
	var repl []vectorstore.Item
	for i, v := range more {
		repl = append(repl, vectorstore.Item{ID: items[10*i+1].ID, Vector: v, Metadata: map[string]string{"shard": "2"}})
	}
	for _, s := range []vectorstore.Store{ann, exact} {
		if err := s.Delete(t.Context(), "r", del); err != nil {
			t.Fatal(err)
		}
		upsertAll(t, s, "r", repl)
	}
	check("after deletes and replaces")

	before := searchAll(t, ann, "r", queries, k)
	if err := ann.Close(); err != nil {
		t.Fatal(err)
	}
	ann = open(t, cfg)
	if c := ann.GraphChanges("r"); c != 0 {
		t.Errorf("reopen changed %d nodes, want 0 (the saved graph loaded as is)", c)
	}
	if after := searchAll(t, ann, "r", queries, k); !slices.Equal(before, after) {
		t.Errorf("results differ after reopen")
	}
	check("after reopen")
}

func searchAll(t *testing.T, s vectorstore.Store, coll string, queries [][]float32, k int) []string {
	t.Helper()
	var out []string
	for _, q := range queries {
		hits, err := s.Search(t.Context(), coll, vectorstore.Query{Vector: q, K: k})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hits {
			out = append(out, fmt.Sprintf("%s:%v", h.ID, h.Score))
		}
	}
	return out
}

// A graph file older than the log is reconciled (only what changed is redone), and a
// damaged one is rebuilt; the results stay those of a store that never closed.
func TestHNSWGraphFileStaleOrDamaged(t *testing.T) {
	const n, dim, k = 3000, 32, 10
	items, queries := recallData(n, dim, 3)
	dir := t.TempDir()
	path := filepath.Join(dir, "v.log")
	cfg := vectorstore.Config{Path: path, NoSync: true, Index: vectorstore.IndexHNSW,
		HNSW: vectorstore.HNSWConfig{ExactBelow: -1}}
	s, err := vectorstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	upsertAll(t, s, "g", items[:2000])
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(path + ".hnsw")
	if err != nil {
		t.Fatal(err)
	}
	s, err = vectorstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	upsertAll(t, s, "g", items[2000:])
	if err := s.Delete(t.Context(), "g", []string{items[0].ID, items[1].ID, items[2500].ID}); err != nil {
		t.Fatal(err)
	}
	live := searchAll(t, s, "g", queries, k)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fresh := open(t, vectorstore.Config{}) // exact
	upsertAll(t, fresh, "g", slices.Concat(items[2:2500], items[2501:]))

	// Stale: the graph saved after the first 2000 items.
	if err := os.WriteFile(path+".hnsw", old, 0o644); err != nil {
		t.Fatal(err)
	}
	s = open(t, cfg)
	if c, want := s.GraphChanges("g"), 1000-1+2; c != want {
		t.Errorf("stale graph: %d nodes changed on open, want %d", c, want)
	}
	checkSameHits(t, s, fresh, queries, k, live)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Damaged: flip a byte in the middle.
	b, err := os.ReadFile(path + ".hnsw")
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path+".hnsw", b, 0o644); err != nil {
		t.Fatal(err)
	}
	s = open(t, cfg)
	if c := s.GraphChanges("g"); c != n-3 {
		t.Errorf("damaged graph: %d nodes changed on open, want %d (a rebuild)", c, n-3)
	}
	checkSameHits(t, s, fresh, queries, k, live)
}

// checkSameHits checks that s holds what ref holds and finds (nearly) what a store that
// never closed found.
func checkSameHits(t *testing.T, s, ref vectorstore.Store, queries [][]float32, k int, live []string) {
	t.Helper()
	r := recall(t, s, ref, "g", queries, k, nil)
	if r < 0.95 {
		t.Errorf("recall against a fresh graph %.3f", r)
	}
	if got := searchAll(t, s, "g", queries, k); len(got) != len(live) {
		t.Errorf("%d hits, want %d", len(got), len(live))
	}
	all, err := s.Search(t.Context(), "g", vectorstore.Query{Vector: queries[0], K: 10000})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2997 {
		t.Errorf("store holds %d items, want 2997", len(all))
	}
}

// The same operations build the same graph: searches agree hit for hit.
func TestHNSWDeterministic(t *testing.T) {
	items, queries := recallData(3000, 32, 5)
	var runs [][]string
	for range 2 {
		s := open(t, vectorstore.Config{Index: vectorstore.IndexHNSW, HNSW: vectorstore.HNSWConfig{ExactBelow: -1, EfSearch: 10}})
		upsertAll(t, s, "d", items)
		runs = append(runs, searchAll(t, s, "d", queries, 10))
	}
	if !slices.Equal(runs[0], runs[1]) {
		t.Error("two stores built from the same items answer differently")
	}
}

// A filter too selective for the graph, or one that matches fewer than K items,
// still returns every match.
func TestHNSWSelectiveFilter(t *testing.T) {
	items, queries := recallData(3000, 32, 11)
	items[17].Metadata = map[string]string{"rare": "yes"}
	items[2999].Metadata = map[string]string{"rare": "yes"}
	s := open(t, vectorstore.Config{Index: vectorstore.IndexHNSW, HNSW: vectorstore.HNSWConfig{ExactBelow: -1}})
	upsertAll(t, s, "f", items)
	hits, err := s.Search(t.Context(), "f", vectorstore.Query{Vector: queries[0], K: 10, Filter: map[string]string{"rare": "yes"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 2 {
		t.Errorf("%d hits, want the 2 matches", len(hits))
	}
	// The filter's bookkeeping follows deletes and replaces.
	if err := s.Delete(t.Context(), "f", []string{items[17].ID}); err != nil {
		t.Fatal(err)
	}
	items[2999].Metadata = map[string]string{"shard": "1"}
	upsertAll(t, s, "f", items[2999:])
	for _, f := range []map[string]string{{"rare": "yes"}, {"shard": "1"}} {
		hits, err := s.Search(t.Context(), "f", vectorstore.Query{Vector: queries[0], K: 1000, Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if f["shard"] == "1" {
			want = 750 // 750 of i%4 == 1 but item 17 (rare), and item 2999
		}
		if len(hits) != want {
			t.Errorf("filter %v: %d hits, want %d", f, len(hits), want)
		}
	}
}

// The log is the same for both indexes: a store written with one opens with the other.
func TestIndexesShareTheLog(t *testing.T) {
	items, queries := recallData(3000, 16, 13)
	path := filepath.Join(t.TempDir(), "v.log")
	hnsw := vectorstore.Config{Path: path, Index: vectorstore.IndexHNSW, HNSW: vectorstore.HNSWConfig{ExactBelow: -1}}
	s, err := vectorstore.Open(hnsw)
	if err != nil {
		t.Fatal(err)
	}
	upsertAll(t, s, "x", items)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	exact, err := vectorstore.Open(vectorstore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := exact.Delete(t.Context(), "x", []string{items[0].ID, items[1].ID}); err != nil {
		t.Fatal(err)
	}
	if err := exact.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, hnsw)
	if c := s.GraphChanges("x"); c != 2 {
		t.Errorf("%d nodes changed on open, want 2 (the deletes made by the exact store)", c)
	}
	ref := open(t, vectorstore.Config{})
	upsertAll(t, ref, "x", items[2:])
	if r := recall(t, s, ref, "x", queries, 10, nil); r < 0.95 {
		t.Errorf("recall@10 %.3f", r)
	}
}

func TestHNSWConfigValidate(t *testing.T) {
	for _, cfg := range []vectorstore.Config{
		{Index: 7},
		{Index: vectorstore.IndexHNSW, HNSW: vectorstore.HNSWConfig{M: 1}},
		{Index: vectorstore.IndexHNSW, HNSW: vectorstore.HNSWConfig{EfSearch: -1}},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("Validate(%+v): nil, want an error", cfg)
		}
	}
}

// Writes save the graph after many changes, so a crash (no Close) leaves little to redo.
func TestHNSWGraphSavedWithoutClose(t *testing.T) {
	items, _ := recallData(5000, 8, 17)
	path := filepath.Join(t.TempDir(), "v.log")
	s := open(t, vectorstore.Config{Path: path, NoSync: true, Index: vectorstore.IndexHNSW})
	if _, err := os.Stat(path + ".hnsw"); !os.IsNotExist(err) {
		t.Fatalf("graph file before any write: %v", err)
	}
	upsertAll(t, s, "a", items)
	if _, err := os.Stat(path + ".hnsw"); err != nil {
		t.Errorf("no graph file after %d inserts: %v", len(items), err)
	}
	if c := s.GraphChanges("a"); c >= 4096 {
		t.Errorf("%d changes since the last save", c)
	}
}

// A graph file of version 1, whose links could cut many copies of one vector off
// from the rest (TestHNSWRecallWithDuplicates), is not loaded: the graph is rebuilt
// once on Open, and saved in this version at Close.
func TestHNSWGraphFileOfVersion1IsRebuilt(t *testing.T) {
	const n, dim, k = 500, 16, 10
	items, queries := recallData(n, dim, 3)
	path := filepath.Join(t.TempDir(), "v.log")
	cfg := vectorstore.Config{Path: path, NoSync: true, Index: vectorstore.IndexHNSW, HNSW: vectorstore.HNSWConfig{ExactBelow: -1}}
	s, err := vectorstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	upsertAll(t, s, "g", items)
	live := searchAll(t, s, "g", queries, k)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path + ".hnsw")
	if err != nil {
		t.Fatal(err)
	}
	if b[7] != 2 {
		t.Fatalf("the graph file is of version %d, want 2", b[7])
	}
	b[7] = 1 // as a build before version 2 saved it
	if err := os.WriteFile(path+".hnsw", b, 0o644); err != nil {
		t.Fatal(err)
	}
	s = open(t, cfg)
	if c := s.GraphChanges("g"); c != n {
		t.Errorf("a graph file of version 1: %d nodes changed on open, want %d (a rebuild)", c, n)
	}
	fresh := open(t, vectorstore.Config{})
	upsertAll(t, fresh, "g", items)
	if r := recall(t, s, fresh, "g", queries, k, nil); r < 0.95 {
		t.Errorf("recall after the rebuild %.3f", r)
	}
	if got := searchAll(t, s, "g", queries, k); len(got) != len(live) {
		t.Errorf("%d hits, want %d", len(got), len(live))
	}
}
