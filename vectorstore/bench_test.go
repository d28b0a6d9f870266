package vectorstore_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/troupe-run/troupe/vectorstore"
	"github.com/troupe-run/troupe/vectorstore/vectorstoretest"
)

func benchVectors(rng *rand.Rand, n, dim int) [][]float32 {
	out := make([][]float32, n)
	for i := range out {
		v := make([]float32, dim)
		for j := range v {
			v[j] = float32(rng.NormFloat64())
		}
		out[i] = v
	}
	return out
}

// BenchmarkSearch measures one exact top-10 search over 10,000 vectors of dimension
// 384 (a typical sentence-embedding size), without and with a metadata filter that
// keeps a tenth of the items.
func BenchmarkSearch(b *testing.B) {
	const n, dim, k = 10_000, 384, 10
	rng := rand.New(rand.NewPCG(1, 2))
	s, err := vectorstore.Open(vectorstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	vecs := benchVectors(rng, n, dim)
	for i := 0; i < n; i += 1000 {
		batch := make([]vectorstore.Item, 1000)
		for j := range batch {
			batch[j] = vectorstore.Item{ID: fmt.Sprint(i + j), Vector: vecs[i+j],
				Metadata: map[string]string{"shard": fmt.Sprint((i + j) % 10)}}
		}
		if err := s.Upsert(b.Context(), "bench", batch); err != nil {
			b.Fatal(err)
		}
	}
	queries := benchVectors(rng, 64, dim)
	for _, bc := range []struct {
		name   string
		filter map[string]string
	}{
		{"n=10000/dim=384/k=10", nil},
		{"n=10000/dim=384/k=10/filter=10%", map[string]string{"shard": "3"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				hits, err := s.Search(b.Context(), "bench", vectorstore.Query{Vector: queries[i%len(queries)], K: k, Filter: bc.filter})
				if err != nil || len(hits) != k {
					b.Fatal(len(hits), err)
				}
				i++
			}
		})
	}
}

// BenchmarkUpsert measures upserting one item of dimension 384 per call: in memory,
// logged without fsync, and logged with an fsync per call (the default).
func BenchmarkUpsert(b *testing.B) {
	const dim = 384
	vecs := benchVectors(rand.New(rand.NewPCG(3, 4)), 1024, dim)
	for _, bc := range []struct {
		name string
		cfg  func(dir string) vectorstore.Config
	}{
		{"memory", func(string) vectorstore.Config { return vectorstore.Config{} }},
		{"log-nosync", func(dir string) vectorstore.Config {
			return vectorstore.Config{Path: filepath.Join(dir, "v.log"), NoSync: true}
		}},
		{"log-fsync", func(dir string) vectorstore.Config { return vectorstore.Config{Path: filepath.Join(dir, "v.log")} }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := vectorstore.Open(bc.cfg(b.TempDir()))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			i := 0
			for b.Loop() {
				item := vectorstore.Item{ID: fmt.Sprint(i), Vector: vecs[i%len(vecs)], Metadata: map[string]string{"n": "1"}}
				if err := s.Upsert(b.Context(), "bench", []vectorstore.Item{item}); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkHNSW measures the HNSW index over 20,000 clustered vectors of dimension
// 384 (50 clusters, see vectorstoretest.Clustered): a top-10 search without and with
// a filter that keeps a tenth of the items, and single-item writes into the graph
// (upsert of a new item, delete of one). Compare the searches with BenchmarkSearch;
// go run ./bench/ann measures recall and larger collections.
func BenchmarkHNSW(b *testing.B) {
	const n, dim, k = 20_000, 384, 10
	rng := rand.New(rand.NewPCG(1, 2))
	vecs, _ := vectorstoretest.Clustered(rng, n+1024, dim, 50, 0.6, 1)
	s, err := vectorstore.Open(vectorstore.Config{Index: vectorstore.IndexHNSW})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < n; i += 1000 {
		batch := make([]vectorstore.Item, 1000)
		for j := range batch {
			batch[j] = vectorstore.Item{ID: fmt.Sprint(i + j), Vector: vecs[i+j],
				Metadata: map[string]string{"shard": fmt.Sprint((i + j) % 10)}}
		}
		if err := s.Upsert(b.Context(), "bench", batch); err != nil {
			b.Fatal(err)
		}
	}
	queries := vecs[n:]
	for _, bc := range []struct {
		name   string
		filter map[string]string
	}{
		{"search/n=20000/dim=384/k=10", nil},
		{"search/n=20000/dim=384/k=10/filter=10%", map[string]string{"shard": "3"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				hits, err := s.Search(b.Context(), "bench", vectorstore.Query{Vector: queries[i%len(queries)], K: k, Filter: bc.filter})
				if err != nil || len(hits) != k {
					b.Fatal(len(hits), err)
				}
				i++
			}
		})
	}
	b.Run("upsert-then-delete/n=20000/dim=384", func(b *testing.B) {
		i := 0
		for b.Loop() {
			id := fmt.Sprint("new", i)
			if err := s.Upsert(b.Context(), "bench", []vectorstore.Item{{ID: id, Vector: queries[i%len(queries)]}}); err != nil {
				b.Fatal(err)
			}
			if err := s.Delete(b.Context(), "bench", []string{id}); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
