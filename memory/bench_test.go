package memory_test

import (
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/memory"
)

// corpusText is a memory of a synthetic corpus: a few hundred distinct words, so
// that keyword and vector search both have work to do.
func corpusText(i int) string {
	topics := []string{"billing", "deploy", "invoice", "kubernetes", "coffee", "travel", "Berlin", "Paris", "Acme", "Globex", "release", "outage"}
	verbs := []string{"asked about", "fixed", "planned", "reviewed", "discussed", "postponed", "shipped"}
	return fmt.Sprintf("User %d %s the %s %s ticket %d in week %d", i%97, verbs[i%len(verbs)], topics[i%len(topics)], topics[(i/7)%len(topics)], i, i%53)
}

func batchOf(n, offset int) []memory.AddRequest {
	reqs := make([]memory.AddRequest, n)
	tiers := []memory.Tier{memory.Episodic, memory.Semantic, memory.Episodic, memory.Perceptual}
	for i := range reqs {
		reqs[i] = memory.AddRequest{Tier: tiers[(offset+i)%len(tiers)], Content: corpusText(offset + i)}
	}
	return reqs
}

// BenchmarkAdd1000 adds 1,000 memories in one call (one embedder call, one append).
func BenchmarkAdd1000(b *testing.B) {
	f := newFixture(b)
	ns := f.ns(b, "bench:add")
	ctx := testCtx(b)
	i := 0
	for b.Loop() {
		if _, err := ns.Add(ctx, "", batchOf(1000, i*1000)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(1000*b.N)/b.Elapsed().Seconds(), "memories/s")
}

// BenchmarkSearch10k searches every tier of a namespace of 10,000 memories.
func BenchmarkSearch10k(b *testing.B) {
	f := newFixture(b)
	ns := f.ns(b, "bench:search")
	ctx := testCtx(b)
	for i := range 10 {
		if _, err := ns.Add(ctx, "", batchOf(1000, i*1000)); err != nil {
			b.Fatal(err)
		}
	}
	queries := []string{"billing invoice outage", "who shipped the Acme release", "travel to Berlin", "kubernetes deploy week 12"}
	i := 0
	for b.Loop() {
		res, err := ns.Search(ctx, memory.Query{Text: queries[i%len(queries)]})
		if err != nil || len(res) == 0 {
			b.Fatal(res, err)
		}
		i++
	}
}
