// Command ann measures the HNSW index of the embedded vector store against exact
// search on the same clustered data in the same process: recall@K, query latency
// (p50, p95), the time to build the graph and the time to reopen the store from its
// log and saved graph. It prints one table; bench/ann/README.md keeps the numbers
// of a reference run.
//
//	go run ./bench/ann -n 100000 -dim 384
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/troupe-run/troupe/vectorstore"
	"github.com/troupe-run/troupe/vectorstore/vectorstoretest"
)

type options struct {
	n, dim, clusters, queries, k int
	spread, decay                float64
	m, efc                       int
	efs                          []int
	shards                       int
}

func main() {
	var o options
	var efs string
	flag.IntVar(&o.n, "n", 100_000, "items")
	flag.IntVar(&o.dim, "dim", 384, "dimension")
	flag.IntVar(&o.clusters, "clusters", 50, "gaussian clusters the items are drawn around")
	flag.Float64Var(&o.spread, "spread", 0.6, "norm of a point's offset from its cluster centre (the centre has norm 1)")
	flag.Float64Var(&o.decay, "decay", 1, "noise spectrum decay: 0 isotropic (hardest), 1 about like text embeddings (see vectorstoretest.Clustered)")
	flag.IntVar(&o.queries, "queries", 500, "queries, drawn like the items")
	flag.IntVar(&o.k, "k", 10, "neighbours per query")
	flag.IntVar(&o.m, "m", 0, "HNSW M (0: the store's default)")
	flag.IntVar(&o.efc, "efc", 0, "HNSW EfConstruction (0: the store's default)")
	flag.StringVar(&efs, "ef", "0", "comma-separated HNSW EfSearch values to measure (0: the store's default)")
	flag.IntVar(&o.shards, "shards", 10, "items carry shard=i%shards; the filtered rows search one shard")
	flag.Parse()
	for _, f := range strings.Split(efs, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			fmt.Fprintln(os.Stderr, "ann: -ef:", err)
			os.Exit(2)
		}
		o.efs = append(o.efs, v)
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "ann:", err)
		os.Exit(1)
	}
}

// measured is one row of the table.
type measured struct {
	index    string
	filter   string
	recall   float64
	p50, p95 time.Duration
}

func run(ctx context.Context, o options) error {
	rng := rand.New(rand.NewPCG(1, 2))
	vecs, _ := vectorstoretest.Clustered(rng, o.n+o.queries, o.dim, o.clusters, o.spread, o.decay)
	items := make([]vectorstore.Item, o.n)
	for i := range items {
		items[i] = vectorstore.Item{ID: fmt.Sprintf("item%07d", i), Vector: vecs[i],
			Metadata: map[string]string{"shard": strconv.Itoa(i % o.shards)}}
	}
	queries := vecs[o.n:]
	filters := []map[string]string{nil, {"shard": "1"}}

	exact, err := vectorstore.Open(vectorstore.Config{})
	if err != nil {
		return err
	}
	defer exact.Close()
	if err := upsert(ctx, exact, items); err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "ann")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := vectorstore.Config{Path: filepath.Join(dir, "vectors.log"), NoSync: true, Index: vectorstore.IndexHNSW,
		HNSW: vectorstore.HNSWConfig{M: o.m, EfConstruction: o.efc}}
	ann, err := vectorstore.Open(cfg)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := upsert(ctx, ann, items); err != nil {
		return err
	}
	build := time.Since(start)
	start = time.Now()
	if err := ann.Close(); err != nil { // saves the graph
		return err
	}
	save := time.Since(start)

	var rows []measured
	truth := make(map[string][][]string)
	for _, f := range filters {
		row, ids, err := measure(ctx, exact, "exact", queries, o.k, f, nil)
		if err != nil {
			return err
		}
		truth[label(f)] = ids
		rows = append(rows, row)
	}
	var open time.Duration
	for _, ef := range o.efs {
		cfg.HNSW.EfSearch = ef
		start = time.Now()
		ann, err = vectorstore.Open(cfg) // replays the log, loads the saved graph
		if err != nil {
			return err
		}
		open = time.Since(start)
		name := "hnsw ef=" + strconv.Itoa(ef)
		if ef == 0 {
			name = "hnsw ef=" + strconv.Itoa(vectorstore.DefaultEfSearch)
		}
		for _, f := range filters {
			row, _, err := measure(ctx, ann, name, queries, o.k, f, truth[label(f)])
			if err != nil {
				return err
			}
			rows = append(rows, row)
		}
		if err := ann.Close(); err != nil {
			return err
		}
	}

	// Single-item writes into the full graph: upsert a new item, then delete it.
	cfg.HNSW.EfSearch = 0
	if ann, err = vectorstore.Open(cfg); err != nil {
		return err
	}
	var ups, dels []time.Duration
	for i, q := range queries[:min(len(queries), 200)] {
		id := fmt.Sprintf("extra%04d", i)
		start := time.Now()
		if err := ann.Upsert(ctx, "bench", []vectorstore.Item{{ID: id, Vector: q}}); err != nil {
			return err
		}
		ups = append(ups, time.Since(start))
		start = time.Now()
		if err := ann.Delete(ctx, "bench", []string{id}); err != nil {
			return err
		}
		dels = append(dels, time.Since(start))
	}
	if err := ann.Close(); err != nil {
		return err
	}
	slices.Sort(ups)
	slices.Sort(dels)

	hcfg := vectorstore.HNSWConfig{M: o.m, EfConstruction: o.efc}
	if hcfg.M == 0 {
		hcfg.M = vectorstore.DefaultHNSWM
	}
	if hcfg.EfConstruction == 0 {
		hcfg.EfConstruction = vectorstore.DefaultEfConstruction
	}
	fmt.Printf("n=%d dim=%d clusters=%d spread=%.2f decay=%.2f queries=%d k=%d M=%d efConstruction=%d GOMAXPROCS=%d %s/%s\n",
		o.n, o.dim, o.clusters, o.spread, o.decay, o.queries, o.k, hcfg.M, hcfg.EfConstruction,
		runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH)
	fmt.Printf("build (upsert in batches of 1000): %v; save graph on close: %v; reopen (log replay + graph load): %v\n",
		build.Round(time.Millisecond), save.Round(time.Millisecond), open.Round(time.Millisecond))
	fmt.Printf("single-item writes into the graph (log without fsync), p50/p95: upsert %v/%v, delete %v/%v\n\n",
		ups[len(ups)/2].Round(time.Microsecond), ups[len(ups)*95/100].Round(time.Microsecond),
		dels[len(dels)/2].Round(time.Microsecond), dels[len(dels)*95/100].Round(time.Microsecond))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "index\tfilter\trecall@%d\tp50\tp95\t\n", o.k)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%.4f\t%v\t%v\t\n", r.index, r.filter, r.recall,
			r.p50.Round(time.Microsecond), r.p95.Round(time.Microsecond))
	}
	return tw.Flush()
}

func label(f map[string]string) string {
	if f == nil {
		return "none"
	}
	return "shard=1"
}

func upsert(ctx context.Context, s vectorstore.Store, items []vectorstore.Item) error {
	for i := 0; i < len(items); i += 1000 {
		if err := s.Upsert(ctx, "bench", items[i:min(i+1000, len(items))]); err != nil {
			return err
		}
	}
	return nil
}

// measure runs every query once, timing each, and computes recall against truth
// (nil: the store is the truth, recall 1).
func measure(ctx context.Context, s vectorstore.Store, name string, queries [][]float32, k int,
	filter map[string]string, truth [][]string) (measured, [][]string, error) {
	lat := make([]time.Duration, len(queries))
	ids := make([][]string, len(queries))
	found, total := 0, 0
	for i, q := range queries {
		start := time.Now()
		hits, err := s.Search(ctx, "bench", vectorstore.Query{Vector: q, K: k, Filter: filter})
		lat[i] = time.Since(start)
		if err != nil {
			return measured{}, nil, err
		}
		for _, h := range hits {
			ids[i] = append(ids[i], h.ID)
		}
		if truth != nil {
			for _, id := range truth[i] {
				if slices.Contains(ids[i], id) {
					found++
				}
			}
			total += len(truth[i])
		}
	}
	slices.Sort(lat)
	r := measured{index: name, filter: label(filter), recall: 1,
		p50: lat[len(lat)/2], p95: lat[len(lat)*95/100]}
	if truth != nil {
		r.recall = float64(found) / float64(total)
	}
	return r, ids, nil
}
