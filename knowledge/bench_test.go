package knowledge_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
)

// benchDocument is a Markdown document of about size bytes: sections with
// headings, paragraphs of a few hundred distinct words, a list and a code block, so
// that the splitter, the packer, the tokenizer and the keyword index all have work.
func benchDocument(size int) string {
	words := strings.Fields(`agent actor supervisor message event log replay session memory vector index chunk
		token budget embedding query answer citation source heading paragraph overlap retry backoff gateway model
		provider quota cache cluster node partition broker offset consumer producer schema version payload envelope
		deterministic fold projection snapshot compaction tombstone namespace tenant billing invoice latency throughput`)
	var sb strings.Builder
	for s := 0; sb.Len() < size; s++ {
		fmt.Fprintf(&sb, "# Chapter %d\n\n", s)
		for sub := 0; sub < 3 && sb.Len() < size; sub++ {
			fmt.Fprintf(&sb, "## Section %d.%d\n\n", s, sub)
			for p := 0; p < 4; p++ {
				for w := 0; w < 60; w++ {
					sb.WriteString(words[(s*131+sub*17+p*7+w*w)%len(words)])
					if w%12 == 11 {
						sb.WriteString(". ")
					} else {
						sb.WriteString(" ")
					}
				}
				sb.WriteString("\n\n")
			}
			fmt.Fprintf(&sb, "- item %d one\n- item %d two\n\n```go\nfunc f%d() int { return %d }\n```\n\n", s, s, s, sub)
		}
	}
	return sb.String()
}

// benchIngest ingests a new document of size bytes per iteration (a new source, so
// nothing is skipped), and reports the throughput in MB/s of Markdown.
func benchIngest(b *testing.B, size int, tweak func(*knowledge.Config)) {
	f := newFixture(b, tweak)
	base := f.base(b, "bench")
	doc := benchDocument(size)
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	// The first ingestion loads the tokenizer's ranks: outside the measure.
	if _, err := base.AddText(ctx, "warmup.md", doc, ""); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(doc)))
	i := 0
	for b.Loop() {
		r, err := base.AddText(ctx, fmt.Sprintf("doc%05d.md", i), doc, "")
		if err != nil || r.Status != knowledge.StatusAdded {
			b.Fatal(r, err)
		}
		i++
	}
	b.ReportMetric(float64(base.Stats().Chunks)/float64(i+1), "chunks/doc")
}

// BenchmarkIngestMarkdown ingests 256 KiB Markdown documents with the offline
// hashing embedder (the default): split, pack (cl100k_base), embed, one append to
// SQLite, the keyword index and the embedded vector store.
func BenchmarkIngestMarkdown(b *testing.B) {
	benchIngest(b, 256<<10, func(c *knowledge.Config) { c.Embedder = llm.HashingEmbedder{} })
}

// BenchmarkIngestMarkdownE5 ingests 8 KiB Markdown documents with the real
// embedder of TROUPE_TEST_EMBEDDINGS (multilingual-e5-small): the embedder's time
// dominates.
func BenchmarkIngestMarkdownE5(b *testing.B) {
	passages, _ := e5Embedders(b)
	benchIngest(b, 8<<10, func(c *knowledge.Config) { c.Embedder, c.EmbedderName = passages, "e5-passage" })
}

// BenchmarkSearchHybrid searches a knowledge base of about 1,000 chunks (hashing
// embedder, embedded exact vector store) in hybrid mode, limit 5, pool 4.
func BenchmarkSearchHybrid(b *testing.B) {
	f := newFixture(b, func(c *knowledge.Config) { c.Embedder = llm.HashingEmbedder{} })
	base := f.base(b, "bench")
	ctx := testCtx(b)
	doc := benchDocument(32 << 10)
	for i := range 100 {
		if _, err := base.AddText(ctx, fmt.Sprintf("doc%03d.md", i), fmt.Sprintf("# Document %d\n\n%s", i, doc), ""); err != nil {
			b.Fatal(err)
		}
	}
	queries := []string{"replay deterministic fold", "billing invoice tenant", "Section 3.1 gateway quota", "func f7"}
	i := 0
	for b.Loop() {
		res, err := base.Search(ctx, knowledge.Query{Text: queries[i%len(queries)]})
		if err != nil || len(res.Hits) == 0 {
			b.Fatal(res, err)
		}
		i++
	}
	b.ReportMetric(float64(base.Stats().Chunks), "chunks")
}
