package knowledge_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/pipelines/rag"
	"github.com/troupe-run/troupe/vectorstore"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// countingEmbedder counts the Embed calls and the texts embedded. It does not
// pass on llm.IsLexical: the fixture's hashing vectors stand for a semantic
// embedder's (DefaultAlpha; a hybrid search that found no word of its query
// answers what its vectors rank), as a test that wants the offline embedder's
// ways sets llm.HashingEmbedder itself.
type countingEmbedder struct {
	llm.Embedder
	calls, texts atomic.Int64
}

func (e *countingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	e.calls.Add(1)
	e.texts.Add(int64(len(texts)))
	return e.Embedder.Embed(ctx, texts)
}

func openLog(t testing.TB, dir string) *sqlite.Log {
	t.Helper()
	l, err := sqlite.Open(testCtx(t), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func openStore(t testing.TB, path string) *vectorstore.Embedded {
	t.Helper()
	s, err := vectorstore.Open(vectorstore.Config{Path: path, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

type fixture struct {
	log   *sqlite.Log
	store *vectorstore.Embedded
	emb   *countingEmbedder
	bases *knowledge.Bases
}

func newFixture(t testing.TB, tweak ...func(*knowledge.Config)) *fixture {
	t.Helper()
	f := &fixture{log: openLog(t, t.TempDir()), store: openStore(t, ""), emb: &countingEmbedder{Embedder: llm.HashingEmbedder{}}}
	cfg := knowledge.Config{Log: f.log, Vectors: f.store, Embedder: f.emb, EmbedderName: "hashing", Now: func() time.Time { return t0 },
		EmbedBackoff: time.Millisecond}
	for _, tw := range tweak {
		tw(&cfg)
	}
	bs, err := knowledge.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.bases = bs
	return f
}

func (f *fixture) base(t testing.TB, name string) *knowledge.Base {
	t.Helper()
	b, err := f.bases.Base(testCtx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func events(t testing.TB, log eventlog.Log, name string) []messages.Envelope {
	t.Helper()
	es, err := log.Read(testCtx(t), knowledge.Stream(name), 1)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func addText(t testing.TB, b *knowledge.Base, source, md string) knowledge.AddResult {
	t.Helper()
	r, err := b.AddText(testCtx(t), source, md, "")
	if err != nil {
		t.Fatalf("AddText %q: %v", source, err)
	}
	return r
}

func search(t testing.TB, b *knowledge.Base, q knowledge.Query) knowledge.SearchResult {
	t.Helper()
	r, err := b.Search(testCtx(t), q)
	if err != nil {
		t.Fatalf("Search %+v: %v", q, err)
	}
	return r
}

func sources(hits []knowledge.Hit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, h.Source)
	}
	return out
}

// storeIDs returns every chunk ID the vector store holds for knowledge base name.
func storeIDs(t testing.TB, s vectorstore.Store, name string, dim int) []string {
	t.Helper()
	q := make([]float32, dim)
	for i := range q {
		q[i] = 1
	}
	hits, err := s.Search(testCtx(t), knowledge.Collection(name), vectorstore.Query{Vector: q, K: 100000})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, h := range hits {
		ids = append(ids, h.ID)
	}
	slices.Sort(ids)
	return ids
}

const guide = `# Guide

Troupe runs LLM agents as supervised actors.

## Install

Download the binary and run the installer script. The installer checks the kernel version.

## Configure

Set TROUPE_MODEL to pick a model. The node reads troupe.yaml from the working directory.
`

func TestAddSearchCiteHeadings(t *testing.T) {
	f := newFixture(t)
	b := f.base(t, "docs")
	r := addText(t, b, "guide.md", guide)
	if r.Status != knowledge.StatusAdded || r.Chunks == 0 || r.Hash != rag.DocumentHash([]byte(guide)) {
		t.Fatalf("AddText: %+v", r)
	}
	addText(t, b, "faq.md", "# FAQ\n\nThe coffee machine is on the third floor.\n")
	res := search(t, b, knowledge.Query{Text: "installer script kernel"})
	if len(res.Hits) == 0 || res.Hits[0].Source != "guide.md" {
		t.Fatalf("hits %v, want guide.md first", sources(res.Hits))
	}
	h := res.Hits[0]
	if !strings.HasPrefix(h.HeadingPath, "# Guide") || !strings.Contains(h.Content, "installer") {
		t.Errorf("hit %+v", h)
	}
	if md := guide; h.Start < 0 || h.End > len(md) || h.Start >= h.End {
		t.Errorf("offsets %d..%d out of the Markdown's %d bytes", h.Start, h.End, len(md))
	}
	if h.Label() != "guide.md > "+h.HeadingPath {
		t.Errorf("label %q", h.Label())
	}
	// Each mode alone finds it too; bm25 calls no embedder.
	calls := f.emb.calls.Load()
	for _, mode := range []knowledge.Mode{knowledge.ModeVector, knowledge.ModeBM25} {
		res := search(t, b, knowledge.Query{Text: "installer script kernel", Mode: mode})
		if len(res.Hits) == 0 || res.Hits[0].Source != "guide.md" {
			t.Errorf("%s: hits %v", mode, sources(res.Hits))
		}
	}
	if got := f.emb.calls.Load() - calls; got != 1 {
		t.Errorf("%d embedder calls for a vector and a bm25 search, want 1", got)
	}
	st := b.Stats()
	if st.Documents != 2 || st.Chunks < 2 || st.Dim != 256 || st.Embedder != "hashing" || st.Seq != 2 {
		t.Errorf("stats %+v", st)
	}
	chunks, ok := b.Chunks("guide.md")
	if !ok || len(chunks) != r.Chunks || chunks[0].Source != "guide.md" || chunks[0].Start != strings.Index(guide, "Troupe runs") ||
		chunks[len(chunks)-1].End != len(strings.TrimSpace(guide)) {
		t.Errorf("chunks %+v %v", chunks, ok)
	}
	if _, ok := b.Chunks("nope.md"); ok {
		t.Error("chunks of an unknown document")
	}
	docs := b.Documents()
	if len(docs) != 2 || docs[0].Source != "faq.md" || docs[1].Source != "guide.md" || docs[1].Chunks != r.Chunks {
		t.Errorf("documents %+v", docs)
	}
}

func TestStreamIsNoSessionAndListed(t *testing.T) {
	f := newFixture(t)
	for _, name := range []string{"zeta", "alpha-docs"} {
		addText(t, f.base(t, name), "a.md", "some text")
	}
	if eventlog.IsSession(knowledge.Stream("zeta")) {
		t.Error("a knowledge base's stream counts as a session")
	}
	got, err := f.bases.List(testCtx(t))
	if err != nil || !slices.Equal(got, []string{"alpha-docs", "zeta"}) {
		t.Fatalf("List: %v %v", got, err)
	}
	if c := knowledge.Collection("alpha-docs"); c == knowledge.Collection("alpha_docs") || vectorstore.CheckCollectionName(c) != nil {
		t.Errorf("collection %q", c)
	}
	if c := knowledge.Collection("zeta"); c != "kb_zeta" {
		t.Errorf("collection %q", c)
	}
}

func TestUnchangedDocumentIsSkipped(t *testing.T) {
	f := newFixture(t)
	b := f.base(t, "docs")
	first, err := b.Add(testCtx(t), "guide.md", []byte(guide), "")
	if err != nil {
		t.Fatal(err)
	}
	calls := f.emb.calls.Load()
	again, err := b.Add(testCtx(t), "guide.md", []byte(guide), "")
	if err != nil {
		t.Fatal(err)
	}
	if !again.Skipped() || again.Chunks != first.Chunks || again.Hash != first.Hash {
		t.Errorf("second Add: %+v, want unchanged like %+v", again, first)
	}
	if n := len(events(t, f.log, "docs")); n != 1 {
		t.Errorf("%d events, want 1", n)
	}
	if f.emb.calls.Load() != calls {
		t.Error("the unchanged document was embedded again")
	}
	// The same document under another source is another document.
	other, err := b.Add(testCtx(t), "copy/guide.md", []byte(guide), "")
	if err != nil || other.Status != knowledge.StatusAdded {
		t.Fatalf("copy: %+v %v", other, err)
	}
}

func TestIdempotencyKey(t *testing.T) {
	f := newFixture(t)
	b := f.base(t, "docs")
	r1, err := b.AddText(testCtx(t), "a.md", "alpha text", "k1")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.AddText(testCtx(t), "a.md", "alpha text", "k1")
	if err != nil || r2 != r1 {
		t.Fatalf("repeat under its key: %+v %v, want %+v", r2, err, r1)
	}
	if _, err := b.AddText(testCtx(t), "a.md", "beta text", "k1"); !errors.Is(err, knowledge.ErrKeyReused) {
		t.Errorf("another version under the key: %v, want ErrKeyReused", err)
	}
	if err := b.Remove(testCtx(t), "a.md", "rm"); err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(testCtx(t), "a.md", "rm"); err != nil {
		t.Errorf("repeated removal under its key: %v", err)
	}
	if err := b.Remove(testCtx(t), "a.md", "k1"); !errors.Is(err, knowledge.ErrKeyReused) {
		t.Errorf("removal under an ingestion's key: %v", err)
	}
	if n := len(events(t, f.log, "docs")); n != 2 {
		t.Errorf("%d events, want 2", n)
	}
}

// version is a document of several chunks, each of which names its version.
func version(v int) string {
	var sb strings.Builder
	for i := range 6 {
		fmt.Fprintf(&sb, "## Part %d\n\nShared marker text of part %d, revision rev%d, with filler words about gardens and rivers.\n\n", i, i, v)
	}
	return sb.String()
}

func TestChangedDocumentReplacesItsChunks(t *testing.T) {
	f := newFixture(t, func(c *knowledge.Config) { c.Chunk = rag.ChunkOptions{MaxTokens: 40, OverlapTokens: -1} })
	b := f.base(t, "docs")
	v1 := addText(t, b, "doc.md", "# Doc\n\n"+version(1)+"The word obsolete appears only in the first version.\n")
	addText(t, b, "other.md", "An unrelated note about tea.")
	oldIDs := storeIDs(t, f.store, "docs", 256)
	v2 := addText(t, b, "doc.md", "# Doc\n\n"+version(2))
	if v1.Chunks < 3 || v2.Status != knowledge.StatusReplaced {
		t.Fatalf("v1 %+v v2 %+v", v1, v2)
	}
	es := events(t, f.log, "docs")
	if len(es) != 3 {
		t.Fatalf("%d events, want 3", len(es))
	}
	p, _ := es[2].Decode()
	if ing, ok := p.(*messages.KBDocumentIngested); !ok || len(ing.Chunks) != v2.Chunks || ing.Reason == "" {
		t.Fatalf("the change is %T %+v, want one kb.document_ingested with all %d chunks", p, p, v2.Chunks)
	}
	for _, mode := range []knowledge.Mode{knowledge.ModeHybrid, knowledge.ModeVector, knowledge.ModeBM25} {
		res := search(t, b, knowledge.Query{Text: "revision rev1 obsolete", Mode: mode, Limit: 50})
		for _, h := range res.Hits {
			if strings.Contains(h.Content, "rev1") || strings.Contains(h.Content, "obsolete") {
				t.Errorf("%s: the old version's chunk %s is still found", mode, h.ChunkID)
			}
		}
	}
	if res := search(t, b, knowledge.Query{Text: "obsolete", Mode: knowledge.ModeBM25}); len(res.Hits) != 0 {
		t.Errorf("BM25 still knows the old text: %v", sources(res.Hits))
	}
	newIDs := storeIDs(t, f.store, "docs", 256)
	for _, id := range oldIDs {
		if slices.Contains(newIDs, id) && !slices.ContainsFunc(b.Documents(), func(d knowledge.Document) bool { return d.Source == "other.md" }) {
			t.Errorf("old chunk %s still in the vector store", id)
		}
	}
	if want := v2.Chunks + 1; len(newIDs) != want {
		t.Errorf("vector store holds %d chunks, want %d", len(newIDs), want)
	}
	// Remove takes the document out of every projection.
	if err := b.Remove(testCtx(t), "doc.md", ""); err != nil {
		t.Fatal(err)
	}
	if ids := storeIDs(t, f.store, "docs", 256); len(ids) != 1 {
		t.Errorf("vector store holds %d chunks after the removal, want 1", len(ids))
	}
	if res := search(t, b, knowledge.Query{Text: "marker revision", Limit: 50}); slices.Contains(sources(res.Hits), "doc.md") {
		t.Error("a removed document is still found")
	}
	if err := b.Remove(testCtx(t), "doc.md", ""); !errors.Is(err, knowledge.ErrNotFound) {
		t.Errorf("removing it again: %v, want ErrNotFound", err)
	}
}

// A searcher never sees chunks of two versions of a document in one result, while
// a writer replaces the document again and again.
func TestConcurrentSearchSeesOneVersion(t *testing.T) {
	f := newFixture(t, func(c *knowledge.Config) { c.Chunk = rag.ChunkOptions{MaxTokens: 40, OverlapTokens: -1} })
	b := f.base(t, "docs")
	addText(t, b, "doc.md", version(0))
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var wg sync.WaitGroup
	var searches atomic.Int64
	errs := make(chan error, 8)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				res, err := b.Search(ctx, knowledge.Query{Text: "shared marker text revision", Limit: 20, Mode: knowledge.ModeHybrid})
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				searches.Add(1)
				seen := map[string]bool{}
				for _, h := range res.Hits {
					i := strings.Index(h.Content, "revision rev")
					if i < 0 {
						continue
					}
					seen[strings.Fields(h.Content[i+len("revision "):])[0]] = true
				}
				if len(seen) > 1 {
					errs <- fmt.Errorf("one search saw versions %v", seen)
					return
				}
			}
		}()
	}
	for v := 1; v <= 15; v++ {
		if _, err := b.AddText(ctx, "doc.md", version(v), ""); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if searches.Load() == 0 {
		t.Error("no search ran during the writes")
	}
}

// flakyEmbedder fails its first fails calls with err, then embeds.
type flakyEmbedder struct {
	llm.Embedder
	fails int64
	err   error
	calls atomic.Int64
}

func (e *flakyEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if e.calls.Add(1) <= e.fails {
		return nil, e.err
	}
	return e.Embedder.Embed(ctx, texts)
}

func TestEmbedRetry(t *testing.T) {
	transient := fmt.Errorf("HTTP 503: %w", llm.ErrTransient)
	cases := []struct {
		name      string
		fails     int64
		err       error
		wantCalls int64
		want      error
	}{
		{"recovers after two transient failures", 2, transient, 3, nil},
		{"gives up after the attempts", 100, transient, 4, knowledge.ErrEmbedder},
		{"a permanent error is not retried", 100, errors.New("HTTP 400: bad input"), 1, knowledge.ErrEmbedder},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := &flakyEmbedder{Embedder: llm.HashingEmbedder{}, fails: c.fails, err: c.err}
			f := newFixture(t, func(cfg *knowledge.Config) { cfg.Embedder, cfg.EmbedAttempts = e, 4 })
			b := f.base(t, "docs")
			_, err := b.AddText(testCtx(t), "a.md", "some text to embed", "")
			if !errors.Is(err, c.want) {
				t.Fatalf("AddText: %v, want %v", err, c.want)
			}
			if e.calls.Load() != c.wantCalls {
				t.Errorf("%d calls, want %d", e.calls.Load(), c.wantCalls)
			}
			wantEvents := 0
			if c.want == nil {
				wantEvents = 1
			}
			if n := len(events(t, f.log, "docs")); n != wantEvents {
				t.Errorf("%d events, want %d", n, wantEvents)
			}
		})
	}
	t.Run("batches", func(t *testing.T) {
		e := &countingEmbedder{Embedder: llm.HashingEmbedder{}}
		f := newFixture(t, func(cfg *knowledge.Config) {
			cfg.Embedder, cfg.EmbedBatch, cfg.Chunk = e, 2, rag.ChunkOptions{MaxTokens: 40, OverlapTokens: -1}
		})
		r := addText(t, f.base(t, "docs"), "a.md", version(1))
		if want := int64((r.Chunks + 1) / 2); e.calls.Load() != want || e.texts.Load() != int64(r.Chunks) {
			t.Errorf("%d calls for %d texts, want %d calls for %d chunks", e.calls.Load(), e.texts.Load(), want, r.Chunks)
		}
	})
	t.Run("the back-off honours ctx", func(t *testing.T) {
		e := &flakyEmbedder{Embedder: llm.HashingEmbedder{}, fails: 100, err: transient}
		f := newFixture(t, func(cfg *knowledge.Config) { cfg.Embedder, cfg.EmbedBackoff = e, time.Hour })
		b := f.base(t, "docs")
		ctx, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
		defer cancel()
		_, err := b.AddText(ctx, "a.md", "some text", "")
		if !errors.Is(err, context.DeadlineExceeded) || e.calls.Load() != 1 {
			t.Errorf("%v after %d calls, want the deadline after 1", err, e.calls.Load())
		}
	})
}

// A restart folds the log: the same searches give the same hits, and no passage is
// embedded again, even with an empty vector store.
func TestRestartGivesSameResultsWithoutEmbedding(t *testing.T) {
	dir := t.TempDir()
	storePath := filepath.Join(dir, "vectors.log")
	docs := map[string]string{"guide.md": guide, "faq.md": "# FAQ\n\n## Coffee\n\nThe coffee machine is on the third floor.\n",
		"ops.md": "# Ops\n\nRestart the node with systemctl restart troupe. Logs go to journald.\n"}
	queries := []string{"where is the coffee machine", "restart the node", "installer kernel version", "TROUPE_MODEL"}
	run := func(storePath string, passages *countingEmbedder, ingest bool) [][]knowledge.Hit {
		log := openLog(t, filepath.Join(dir, "log"))
		store := openStore(t, storePath)
		bs, err := knowledge.Open(knowledge.Config{Log: log, Vectors: store, Embedder: passages,
			QueryEmbedder: llm.HashingEmbedder{}, Now: func() time.Time { return t0 }})
		if err != nil {
			t.Fatal(err)
		}
		b, err := bs.Base(testCtx(t), "docs")
		if err != nil {
			t.Fatal(err)
		}
		if ingest {
			for _, src := range []string{"guide.md", "faq.md", "ops.md"} {
				addText(t, b, src, docs[src])
			}
			if err := b.Remove(testCtx(t), "ops.md", ""); err != nil {
				t.Fatal(err)
			}
			addText(t, b, "ops.md", docs["ops.md"]+"\nA second paragraph.\n")
		}
		var out [][]knowledge.Hit
		for _, q := range queries {
			out = append(out, search(t, b, knowledge.Query{Text: q, Limit: 10}).Hits)
		}
		_ = log.Close()
		_ = store.Close()
		return out
	}
	first := &countingEmbedder{Embedder: llm.HashingEmbedder{}}
	want := run(storePath, first, true)
	if first.calls.Load() == 0 {
		t.Fatal("the ingestion embedded nothing")
	}
	for name, path := range map[string]string{"same store": storePath, "empty store": filepath.Join(dir, "fresh.log")} {
		again := &countingEmbedder{Embedder: llm.HashingEmbedder{}}
		got := run(path, again, false)
		if again.calls.Load() != 0 {
			t.Errorf("%s: the restart embedded %d batches", name, again.calls.Load())
		}
		for i := range queries {
			if !slices.Equal(got[i], want[i]) {
				t.Errorf("%s: %q: %v, want %v", name, queries[i], got[i], want[i])
			}
		}
	}
}

func TestHostileInput(t *testing.T) {
	f := newFixture(t)
	b := f.base(t, "docs")
	ctx := testCtx(t)
	huge := make([]byte, knowledge.MaxDocumentBytes+1)
	for i := range huge {
		huge[i] = 'a' + byte(i%26)
	}
	if _, err := b.Add(ctx, "huge.txt", huge, ""); !errors.Is(err, knowledge.ErrTooLarge) || !errors.Is(err, rag.ErrTooLarge) ||
		!strings.Contains(err.Error(), "huge.txt") {
		t.Errorf("huge: %v", err)
	}
	junk := []byte{0x00, 0xff, 0xfe, 0x13, 0x37, 0x00, 0x80, 0x81, 0x9f, 0xc3, 0x28}
	if _, err := b.Add(ctx, "junk.bin", junk, ""); !errors.Is(err, rag.ErrUnsupported) {
		t.Errorf("junk: %v", err)
	}
	if _, err := b.Add(ctx, "junk.md", junk, ""); !errors.Is(err, rag.ErrMalformed) {
		t.Errorf("junk Markdown: %v", err)
	}
	for _, empty := range []string{"", "   \n\n\t  \n"} {
		if _, err := b.Add(ctx, "empty.md", []byte(empty), ""); !errors.Is(err, knowledge.ErrEmpty) {
			t.Errorf("empty %q: %v", empty, err)
		}
	}
	for _, name := range []string{"", "  ", "two\nlines.md", "esc\x1b[31mred.md", "nul\x00.md", "bad\xffutf8.md", strings.Repeat("x", knowledge.MaxSourceLen+1)} {
		if _, err := b.AddText(ctx, name, "text", ""); !errors.Is(err, knowledge.ErrInvalid) {
			t.Errorf("source %q: %v, want ErrInvalid", name, err)
		}
	}
	for _, name := range []string{"", "../etc", "a/b", "-lead", "has space", "ünï", strings.Repeat("k", 65)} {
		_, err := f.bases.Base(ctx, name)
		if !errors.Is(err, knowledge.ErrInvalid) || !strings.Contains(err.Error(), "letters, digits") && name != "" && len(name) <= 64 {
			t.Errorf("knowledge base %q: %v", name, err)
		}
	}
	small := newFixture(t, func(c *knowledge.Config) {
		c.MaxChunks, c.Chunk = 3, rag.ChunkOptions{MaxTokens: 40, OverlapTokens: -1}
	})
	if _, err := small.base(t, "docs").AddText(ctx, "long.md", version(1), ""); !errors.Is(err, knowledge.ErrTooLarge) || !strings.Contains(err.Error(), "limit of 3") {
		t.Errorf("too many chunks: %v", err)
	}
	if n := len(events(t, f.log, "docs")); n != 0 {
		t.Errorf("%d events after only bad input", n)
	}
	// Odd but legal names work, and a document of punctuation only has no vector
	// but is stored.
	for _, name := range []string{"dir with space/ünïcödé [v2].md", `quote"and\backslash.md`} {
		if _, err := b.AddText(ctx, name, "legal content", ""); err != nil {
			t.Errorf("source %q: %v", name, err)
		}
	}
	if r, err := b.AddText(ctx, "dashes.md", "--- *** !!! ???", ""); err != nil || r.Chunks != 1 {
		t.Errorf("punctuation only: %+v %v", r, err)
	}
	if _, err := b.Search(ctx, knowledge.Query{Text: "  "}); !errors.Is(err, knowledge.ErrInvalid) {
		t.Errorf("empty query: %v", err)
	}
	if _, err := b.Search(ctx, knowledge.Query{Text: "x", Mode: "fuzzy"}); !errors.Is(err, knowledge.ErrInvalid) {
		t.Errorf("unknown mode: %v", err)
	}
}

func TestEmbedderDimensionMismatch(t *testing.T) {
	f := newFixture(t)
	addText(t, f.base(t, "docs"), "a.md", "text one")
	other, err := knowledge.Open(knowledge.Config{Log: f.log, Vectors: f.store, Embedder: llm.HashingEmbedder{Dim: 64}, EmbedderName: "small"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := other.Base(testCtx(t), "docs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddText(testCtx(t), "b.md", "text two", ""); !errors.Is(err, knowledge.ErrEmbedder) || !strings.Contains(err.Error(), "dimension 256") {
		t.Errorf("another embedder's dimension: %v", err)
	}
	if _, err := b.Search(testCtx(t), knowledge.Query{Text: "text", Mode: knowledge.ModeVector}); !errors.Is(err, knowledge.ErrDimension) {
		t.Errorf("a query of another dimension: %v", err)
	}
	if res, err := b.Search(testCtx(t), knowledge.Query{Text: "text", Mode: knowledge.ModeBM25}); err != nil || len(res.Hits) != 1 {
		t.Errorf("bm25 needs no embedder: %v %v", res.Hits, err)
	}
}

// Two documents that share a passage (overlapping exports of one page): the pool
// keeps the passage once.
func TestPoolDedupesSameText(t *testing.T) {
	f := newFixture(t)
	b := f.base(t, "docs")
	shared := "The backup runs nightly at 02:00 and keeps thirty days of snapshots."
	addText(t, b, "a.md", shared)
	addText(t, b, "b.md", shared)
	addText(t, b, "c.md", "Snapshots of the backup are encrypted.")
	res := search(t, b, knowledge.Query{Text: "backup snapshots nightly", Limit: 10})
	n := 0
	for _, h := range res.Hits {
		if h.Content == shared {
			n++
		}
	}
	if n != 1 || len(res.Hits) != 2 {
		t.Errorf("hits %v: the shared passage %d times, want once beside c.md", sources(res.Hits), n)
	}
}

func TestRerankHookOrder(t *testing.T) {
	var seen []knowledge.Hit
	f := newFixture(t, func(c *knowledge.Config) {
		c.Rerank = func(_ context.Context, query string, hits []knowledge.Hit) ([]knowledge.Hit, error) {
			if query != "river garden" {
				return nil, fmt.Errorf("query %q", query)
			}
			seen = slices.Clone(hits)
			out := slices.Clone(hits[1:]) // drop the best
			slices.Reverse(out)
			return append(out, knowledge.Hit{ChunkID: "c_invented", Content: "not in the pool"}), nil
		}
	})
	b := f.base(t, "docs")
	for i := range 12 {
		addText(t, b, fmt.Sprintf("d%02d.md", i), fmt.Sprintf("Note %d about the river%s and the garden%s.", i, strings.Repeat(" river", i%3), strings.Repeat(" garden", i%4)))
	}
	res := search(t, b, knowledge.Query{Text: "river garden", Limit: 3})
	if len(seen) <= 3 {
		t.Fatalf("the hook saw %d hits, want the pool (more than the limit)", len(seen))
	}
	want := slices.Clone(seen[1:])
	slices.Reverse(want)
	want = want[:3]
	if !slices.Equal(res.Hits, want) {
		t.Errorf("hits %v, want the hook's order %v", sources(res.Hits), sources(want))
	}
	f2 := newFixture(t, func(c *knowledge.Config) {
		c.Rerank = func(context.Context, string, []knowledge.Hit) ([]knowledge.Hit, error) {
			return nil, errors.New("reranker down")
		}
	})
	b2 := f2.base(t, "docs")
	addText(t, b2, "a.md", "river")
	if _, err := b2.Search(testCtx(t), knowledge.Query{Text: "river"}); err == nil || !strings.Contains(err.Error(), "reranker down") {
		t.Errorf("a failing reranker: %v", err)
	}
}

// A document embedded by another embedder of the same dimension is not
// "unchanged": it is embedded again and replaced.
func TestNewEmbedderReingests(t *testing.T) {
	f := newFixture(t)
	addText(t, f.base(t, "docs"), "a.md", "some text")
	other, err := knowledge.Open(knowledge.Config{Log: f.log, Vectors: f.store, Embedder: llm.HashingEmbedder{}, EmbedderName: "hashing-v2"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := other.Base(testCtx(t), "docs")
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.AddText(testCtx(t), "a.md", "some text", "")
	if err != nil || r.Status != knowledge.StatusReplaced {
		t.Fatalf("%+v %v", r, err)
	}
	if d := b.Documents(); len(d) != 1 || d[0].Embedder != "hashing-v2" {
		t.Errorf("documents %+v", d)
	}
}

// flakyStore fails every call while down is set, and counts the searches it
// answered.
type flakyStore struct {
	vectorstore.Store
	down     atomic.Bool
	searches atomic.Int64
}

var errStoreDown = errors.New("vector store unavailable")

func (s *flakyStore) Upsert(ctx context.Context, coll string, items []vectorstore.Item) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.Store.Upsert(ctx, coll, items)
}

func (s *flakyStore) Delete(ctx context.Context, coll string, ids []string) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.Store.Delete(ctx, coll, ids)
}

func (s *flakyStore) Search(ctx context.Context, coll string, q vectorstore.Query) ([]vectorstore.Hit, error) {
	if s.down.Load() {
		return nil, errStoreDown
	}
	s.searches.Add(1)
	return s.Store.Search(ctx, coll, q)
}

// A vector store that is down loses no write and fails no search: the write is
// stored and answered as such, vector and hybrid searches rank the fold's own
// vectors (with a note), and once the store is back and the retry wait is over, the
// next operation writes what it missed, embedding nothing, and searches ask the
// store again. Config.VectorTrouble hears of the failure and the recovery.
func TestVectorStoreOutageCatchesUp(t *testing.T) {
	store := &flakyStore{Store: openStore(t, "")}
	clock := newTestClock()
	var mu sync.Mutex
	var heard []string
	f := newFixture(t, func(c *knowledge.Config) {
		c.Vectors = store
		c.Now = clock.Now
		c.VectorTrouble = func(base, coll string, err error) {
			mu.Lock()
			defer mu.Unlock()
			heard = append(heard, fmt.Sprintf("%s %s %v", base, coll, err))
		}
	})
	b := f.base(t, "docs")
	if _, err := b.AddText(testCtx(t), "b.md", "Tide tables for the harbour.", ""); err != nil {
		t.Fatal(err)
	}
	store.down.Store(true)
	r, err := b.AddText(testCtx(t), "a.md", "The lighthouse keeper logs the weather.", "")
	if err != nil || r.Status != knowledge.StatusAdded {
		t.Fatalf("AddText during the outage: %+v, %v; want it stored", r, err)
	}
	for _, mode := range []knowledge.Mode{knowledge.ModeVector, knowledge.ModeHybrid} {
		res := search(t, b, knowledge.Query{Text: "lighthouse weather", Mode: mode, Limit: 1})
		if got := sources(res.Hits); len(got) != 1 || got[0] != "a.md" {
			t.Errorf("%s search during the outage: hits %v, want a.md", mode, got)
		}
		if !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "vector store lags") }) {
			t.Errorf("%s search during the outage: notes %q, want one saying the store lags", mode, res.Notes)
		}
	}
	if store.searches.Load() != 0 {
		t.Errorf("%d searches reached the store while it was down", store.searches.Load())
	}

	store.down.Store(false)
	clock.Add(time.Minute) // past the retry wait
	calls := f.emb.calls.Load()
	res := search(t, b, knowledge.Query{Text: "lighthouse weather", Mode: knowledge.ModeVector, Limit: 1})
	if got := sources(res.Hits); len(got) != 1 || got[0] != "a.md" || len(res.Notes) != 0 || store.searches.Load() != 1 {
		t.Errorf("after the outage: hits %v, notes %q, %d store searches; want a.md from the store, no note", got, res.Notes, store.searches.Load())
	}
	if f.emb.calls.Load() != calls+1 {
		t.Errorf("%d embedder calls after the outage, want the query's only", f.emb.calls.Load()-calls)
	}
	if r, err := b.AddText(testCtx(t), "a.md", "The lighthouse keeper logs the weather.", ""); err != nil || !r.Skipped() {
		t.Errorf("the stored document again: %+v %v", r, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != 2 || !strings.Contains(heard[0], "unavailable") || !strings.HasSuffix(heard[1], "<nil>") {
		t.Errorf("VectorTrouble heard %q, want the failure then the recovery", heard)
	}
}

// A knowledge base opens while the vector store is down (after a restart): its
// searches answer from the fold, and the rebuild waits for the store.
func TestBaseOpensWhileVectorStoreIsDown(t *testing.T) {
	store := &flakyStore{Store: openStore(t, "")}
	f := newFixture(t, func(c *knowledge.Config) { c.Vectors = store })
	if _, err := f.base(t, "docs").AddText(testCtx(t), "a.md", "The lighthouse keeper logs the weather.", ""); err != nil {
		t.Fatal(err)
	}
	store.down.Store(true)
	bs, err := knowledge.Open(knowledge.Config{Log: f.log, Vectors: store, Embedder: f.emb, EmbedderName: "hashing", Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	b, err := bs.Base(testCtx(t), "docs")
	if err != nil {
		t.Fatalf("opening a knowledge base while the store is down: %v", err)
	}
	res := search(t, b, knowledge.Query{Text: "lighthouse", Mode: knowledge.ModeVector})
	if got := sources(res.Hits); len(got) != 1 || len(res.Notes) == 0 {
		t.Errorf("search after a restart during the outage: hits %v, notes %q", got, res.Notes)
	}
}

// A passage is cited by the section it is from: a chunk never spans a heading, so
// the answer to a question about the second section of a short document does not
// cite the first. A document of sections too many to make a chunk each is still
// ingested, its chunks spanning sections, cited by the headings they share.
func TestChunksAreCitedByTheirOwnSection(t *testing.T) {
	f := newFixture(t, func(c *knowledge.Config) { c.MaxChunks = 4 })
	b := f.base(t, "docs")
	addText(t, b, "ops.md", "# Operations\n\n## Backups\n\nCopy the data directory while the node is stopped.\n\n"+
		"## Restore\n\nTo restore, put the copied directory back and start the node.")
	ans, err := b.Ask(testCtx(t), "How do I restore the node?", knowledge.AskOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(ans.Citations) != 1 || ans.Citations[0].HeadingPath != "# Operations > ## Restore" || !strings.Contains(ans.Text, "put the copied directory back") {
		t.Errorf("answer %q citing %+v; want the Restore section cited", ans.Text, ans.Citations)
	}
	var changelog strings.Builder
	changelog.WriteString("# Changelog\n\n")
	for i := range 10 {
		fmt.Fprintf(&changelog, "## v1.%d\n\nFixed bug %d.\n\n", i, i)
	}
	r := addText(t, b, "CHANGELOG.md", changelog.String())
	if r.Chunks > 4 {
		t.Errorf("%d chunks, over MaxChunks", r.Chunks)
	}
	hits := search(t, b, knowledge.Query{Text: "v1.7", Mode: knowledge.ModeBM25, Limit: 1}).Hits
	if len(hits) != 1 || hits[0].Source != "CHANGELOG.md" || hits[0].HeadingPath != "# Changelog" || !strings.Contains(hits[0].Content, "Fixed bug 7.") {
		t.Errorf("hits %+v", hits)
	}
}

// A base moved to an embedder of another dimension — every document removed, then
// added again with the new embedder — searches its vectors in the store, in a
// collection of the new dimension: the first collection keeps its dimension for
// good and refused them, and every search ran in memory with a note saying that the
// store lagged. The first collection is emptied of the base's vectors.
func TestBaseMovesToAnEmbedderOfAnotherDimension(t *testing.T) {
	f := newFixture(t)
	first := f.base(t, "docs")
	addText(t, first, "a.md", "# A\n\nThe lighthouse keeper logs the weather.")
	addText(t, first, "b.md", "# B\n\nThe ferry leaves at noon.")
	for _, src := range []string{"a.md", "b.md"} {
		if err := first.Remove(testCtx(t), src, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.bases.Close(); err != nil {
		t.Fatal(err)
	}
	open := func() *knowledge.Base {
		bs, err := knowledge.Open(knowledge.Config{Log: f.log, Vectors: f.store, Embedder: llm.HashingEmbedder{Dim: 64}, EmbedderName: "small",
			Now: func() time.Time { return t0 }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bs.Close() })
		b, err := bs.Base(testCtx(t), "docs")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := open()
	addText(t, b, "a.md", "# A\n\nThe lighthouse keeper logs the weather.")
	check := func(when string, b *knowledge.Base) {
		t.Helper()
		res := search(t, b, knowledge.Query{Text: "lighthouse weather", Mode: knowledge.ModeVector})
		if len(res.Notes) != 0 || len(res.Hits) != 1 || res.Hits[0].Source != "a.md" {
			t.Errorf("%s: hits %v, notes %q", when, sources(res.Hits), res.Notes)
		}
		if coll := b.Stats().Collection; coll == knowledge.Collection("docs") {
			t.Errorf("%s: the vectors of dimension 64 in %s, the collection of dimension 256", when, coll)
		}
		hits, err := f.store.Search(testCtx(t), knowledge.Collection("docs"), vectorstore.Query{Vector: slices.Repeat([]float32{1}, 256), K: 10})
		if err != nil || len(hits) != 0 {
			t.Errorf("%s: the first collection holds %d vectors (%v)", when, len(hits), err)
		}
	}
	check("after the move", b)
	check("opened again", open())
}

// countingStore counts the items written to and deleted from a store.
type countingStore struct {
	vectorstore.Store
	upserted, deleted atomic.Int64
}

func (s *countingStore) Upsert(ctx context.Context, coll string, items []vectorstore.Item) error {
	s.upserted.Add(int64(len(items)))
	return s.Store.Upsert(ctx, coll, items)
}

func (s *countingStore) Delete(ctx context.Context, coll string, ids []string) error {
	s.deleted.Add(int64(len(ids)))
	return s.Store.Delete(ctx, coll, ids)
}

// A base opened again on a store in line with its stream writes nothing to the
// store (every node rag command and every start of a node wrote every vector of
// the base again); a store that lost a vector or kept a removed one (a crash
// between the event and the store's write) gets exactly those put right.
func TestOpeningABaseInLineWithItsStoreWritesNothing(t *testing.T) {
	f := newFixture(t)
	b := f.base(t, "docs")
	for i := range 5 {
		addText(t, b, fmt.Sprintf("d%d.md", i), fmt.Sprintf("# D%d\n\nParagraph one of d%d about otters.\n\n## More\n\nParagraph two of d%d about beavers.", i, i, i))
	}
	removed, _ := b.Chunks("d4.md")
	if err := b.Remove(testCtx(t), "d4.md", ""); err != nil {
		t.Fatal(err)
	}
	live := len(b.Documents()) * 2
	open := func() (*countingStore, *knowledge.Base) {
		store := &countingStore{Store: f.store}
		bs, err := knowledge.Open(knowledge.Config{Log: f.log, Vectors: store, Embedder: llm.HashingEmbedder{}, EmbedderName: "hashing", Now: func() time.Time { return t0 }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bs.Close() })
		b, err := bs.Base(testCtx(t), "docs")
		if err != nil {
			t.Fatal(err)
		}
		return store, b
	}
	store, b2 := open()
	if res := search(t, b2, knowledge.Query{Text: "beavers", Mode: knowledge.ModeVector, Limit: 10}); len(res.Notes) != 0 || len(res.Hits) != live {
		t.Fatalf("search after the open: %d hits %q", len(res.Hits), res.Notes)
	}
	if u, d := store.upserted.Load(), store.deleted.Load(); u != 0 || d != 0 {
		t.Errorf("opening a base in line with its store upserted %d vectors and deleted %d; want none", u, d)
	}
	// The store loses d0's vectors and gets back one of d4's, as after a crash.
	d0, _ := b.Chunks("d0.md")
	var lost []string
	for _, h := range d0 {
		lost = append(lost, h.ChunkID)
	}
	if err := f.store.Delete(testCtx(t), knowledge.Collection("docs"), lost); err != nil {
		t.Fatal(err)
	}
	stray := vectorstore.Item{ID: removed[0].ChunkID, Vector: slices.Repeat([]float32{1}, 256), Metadata: map[string]string{"kb": "docs", "source": "d4.md"}}
	if err := f.store.Upsert(testCtx(t), knowledge.Collection("docs"), []vectorstore.Item{stray}); err != nil {
		t.Fatal(err)
	}
	store, b3 := open()
	if res := search(t, b3, knowledge.Query{Text: "beavers", Mode: knowledge.ModeVector, Limit: 10}); len(res.Notes) != 0 || len(res.Hits) != live {
		t.Fatalf("search after the repair: %d hits %q", len(res.Hits), res.Notes)
	}
	if u := store.upserted.Load(); u != int64(len(lost)) {
		t.Errorf("the repair upserted %d vectors; want the %d lost", u, len(lost))
	}
	hits, err := f.store.Search(testCtx(t), knowledge.Collection("docs"), vectorstore.Query{Vector: stray.Vector, K: 100})
	if err != nil || len(hits) != live {
		t.Errorf("the store holds %d vectors after the repair (%v); want the %d live", len(hits), err, live)
	}
}

// With the offline hashing embedder (the default), a hybrid search leans on BM25:
// the hashing vectors of texts that share no word score by hash collisions, which
// min-max normalisation stretched to the full scale, so that at an even mix a
// passage about Homebrew ranked first for "how large may an upload be".
func TestHybridSearchWithTheHashingEmbedderLeansOnWords(t *testing.T) {
	bs, err := knowledge.Open(knowledge.Config{Log: openLog(t, t.TempDir()), Vectors: openStore(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bs.Close() })
	b, err := bs.Base(testCtx(t), "docs")
	if err != nil {
		t.Fatal(err)
	}
	addText(t, b, "install.md", "# Install\n\n## Linux\n\nDownload the tarball and run node serve. The node listens on 127.0.0.1:8080.\n\n"+
		"## macOS\n\nUse Homebrew: brew install troupe, then start the node with node serve.\n")
	addText(t, b, "limits.md", "# Limits\n\n## Uploads\n\nA document is at most 32 MiB. Larger uploads are refused with status 413.\n\n"+
		"## Search\n\nA search returns at most 100 passages; the default limit is 5.\n")
	hits := search(t, b, knowledge.Query{Text: "how large may an upload be", Limit: 3}).Hits
	if len(hits) == 0 || hits[0].Label() != "limits.md > # Limits > ## Uploads" {
		var labels []string
		for _, h := range hits {
			labels = append(labels, fmt.Sprintf("%s (%.3f)", h.Label(), h.Score))
		}
		t.Errorf("hits %v; want the Uploads section first", labels)
	}
}

// A document whose name CheckSource refuses now (a bidirectional control, refused
// since) but that a base holds from before can still be removed, by name and by a
// prune; a name the base never held is refused for what it is.
func TestRemoveADocumentNamedBeforeTheRulesTightened(t *testing.T) {
	ctx := testCtx(t)
	t.Chdir(t.TempDir())
	writeFile(t, "docs/a.md", "# A\n\nAlpha.", 0o644)
	f := newFixture(t)
	b := f.base(t, "docs")
	if _, err := knowledge.AddFolder(ctx, b, []string{"docs"}, knowledge.FolderOptions{}); err != nil {
		t.Fatal(err)
	}
	appendOld := func(source string, seq uint64) {
		t.Helper()
		vs, _ := llm.HashingEmbedder{}.Embed(ctx, []string{"beta"})
		env, err := messages.NewEnvelope(&messages.KBDocumentIngested{Reason: "new document", Source: source, Hash: fmt.Sprint("h", seq), Bytes: 4,
			MarkdownBytes: 4, Embedder: "hashing", Chunks: []messages.KBChunk{{ChunkID: fmt.Sprint("c_old", seq), Tokens: 1, End: 4, Text: "beta", Vector: messages.Vector(vs[0])}}})
		if err != nil {
			t.Fatal(err)
		}
		env.ID, env.SessionID, env.Seq, env.TS, env.Actor = fmt.Sprint("kb-old-", seq), knowledge.Stream("docs"), seq, t0.UnixMicro(), "knowledge"
		if err := f.log.Append(ctx, []messages.Envelope{env}); err != nil {
			t.Fatal(err)
		}
	}
	appendOld("\u202egnp.exe", 2)
	appendOld("docs/\u202egone.md", 3)
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(ctx, "\u202egnp.exe", ""); err != nil {
		t.Errorf("removing a document named before the rules tightened: %v", err)
	}
	res, err := knowledge.AddFolder(ctx, b, []string{"docs"}, knowledge.FolderOptions{Prune: true})
	if err != nil || !slices.Equal(res.Removed, []string{"docs/\u202egone.md"}) {
		t.Errorf("prune: %+v %v", res, err)
	}
	if err := b.Remove(ctx, "\u202enever.md", ""); !errors.Is(err, knowledge.ErrInvalid) {
		t.Errorf("removing a name never held: %v, want ErrInvalid", err)
	}
	if got := b.Documents(); len(got) != 1 || got[0].Source != "docs/a.md" {
		t.Errorf("documents %+v", got)
	}
}

// A Markdown page of headings only (an outline, a table of contents) is ingested
// as its headings' text, cited under the headings above each; an empty or
// whitespace-only document is still refused as ErrEmpty, naming it.
func TestHeadingOnlyDocument(t *testing.T) {
	f := newFixture(t)
	b := f.base(t, "docs")
	ctx := testCtx(t)
	res, err := b.AddText(ctx, "outline.md", "# Deployment guide\n\n## Kubernetes\n\n## Bare metal\n", "")
	if err != nil {
		t.Fatalf("a heading-only page: %v", err)
	}
	if res.Status != knowledge.StatusAdded || res.Chunks == 0 {
		t.Fatalf("a heading-only page: %+v, want it added with its chunks", res)
	}
	found, err := b.Search(ctx, knowledge.Query{Text: "kubernetes", Limit: 5, Mode: knowledge.ModeBM25})
	if err != nil {
		t.Fatal(err)
	}
	if len(found.Hits) == 0 || found.Hits[0].Source != "outline.md" || found.Hits[0].HeadingPath != "# Deployment guide" ||
		!strings.Contains(found.Hits[0].Content, "## Kubernetes") {
		t.Fatalf("search for a heading of the page: %+v", found.Hits)
	}
	for name, body := range map[string]string{"empty.md": "", "blank.md": "  \n\n\t\n"} {
		if _, err := b.AddText(ctx, name, body, ""); !errors.Is(err, knowledge.ErrEmpty) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want ErrEmpty naming it", name, err)
		}
	}
}

// A passage is found whichever Unicode spelling of its accented letters it and the
// query use: a document written with decomposed letters (e and U+0301, as macOS
// writes them) answers a query typed with composed ones (U+00E9), by every mode.
func TestSearchFindsEitherUnicodeSpelling(t *testing.T) {
	f := newFixture(t)
	b := f.base(t, "docs")
	addText(t, b, "menu.md", "# Menu\n\nThe cafe\u0301 serves cre\u0300me bru\u0302le\u0301e.\n")
	addText(t, b, "faq.md", "# FAQ\n\nThe coffee machine is on the third floor.\n")
	for _, mode := range []knowledge.Mode{knowledge.ModeHybrid, knowledge.ModeVector, knowledge.ModeBM25} {
		res := search(t, b, knowledge.Query{Text: "caf\u00e9 cr\u00e8me br\u00fbl\u00e9e", Mode: mode, Limit: 1})
		if len(res.Hits) == 0 || res.Hits[0].Source != "menu.md" {
			t.Errorf("%s: hits %v, want menu.md", mode, sources(res.Hits))
		}
	}
}

// A source name is one document whichever Unicode spelling of its accents it is
// given in: "café.md" added with a composed é (U+00E9) and again with e + U+0301,
// as macOS names files, replaces the one document, named in NFC. A document stored
// under a decomposed name before names were normalised stays reachable under both
// spellings: a new version of it replaces it, Chunks finds it, Remove removes it.
func TestSourceNameIsOneDocumentInEitherUnicodeSpelling(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	b := f.base(t, "docs")
	const composed, decomposed = "caf\u00e9.md", "cafe\u0301.md"
	addText(t, b, composed, "# Menu\n\nEspresso.\n")
	if r := addText(t, b, decomposed, "# Menu\n\nEspresso and tea.\n"); r.Status != knowledge.StatusReplaced || r.Source != composed {
		t.Errorf("the decomposed name after the composed one: %+v, want the document replaced, named in NFC", r)
	}
	if r := addText(t, b, decomposed, "# Menu\n\nEspresso and tea.\n"); r.Status != knowledge.StatusUnchanged {
		t.Errorf("the same content again under the decomposed name: %+v, want unchanged", r)
	}
	if got := b.Documents(); len(got) != 1 || got[0].Source != composed {
		t.Fatalf("documents %+v, want one, %q", got, composed)
	}

	// A document stored under a decomposed name, before names were normalised.
	const oldName = "cre\u0300me.md"
	vs, _ := llm.HashingEmbedder{}.Embed(ctx, []string{"custard"})
	env, err := messages.NewEnvelope(&messages.KBDocumentIngested{Reason: "new document", Source: oldName, Hash: "hold", Bytes: 7,
		MarkdownBytes: 7, Embedder: "hashing", Chunks: []messages.KBChunk{{ChunkID: "c_old", Tokens: 1, End: 7, Text: "custard", Vector: messages.Vector(vs[0])}}})
	if err != nil {
		t.Fatal(err)
	}
	env.ID, env.SessionID, env.Seq, env.TS, env.Actor = "kb-old", knowledge.Stream("docs"), uint64(len(events(t, f.log, "docs"))+1), t0.UnixMicro(), "knowledge"
	if err := f.log.Append(ctx, []messages.Envelope{env}); err != nil {
		t.Fatal(err)
	}
	if err := b.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{oldName, "cr\u00e8me.md"} {
		if _, ok := b.Chunks(name); !ok {
			t.Errorf("Chunks(%+q): the document stored under the decomposed name is not found", name)
		}
	}
	if r := addText(t, b, "cr\u00e8me.md", "# Cr\u00e8me\n\nCustard and caramel.\n"); r.Status != knowledge.StatusReplaced || r.Source != oldName {
		t.Errorf("a new version under the composed name: %+v, want the stored document replaced", r)
	}
	if got := b.Documents(); len(got) != 2 {
		t.Errorf("documents %+v, want two", got)
	}
	if err := b.Remove(ctx, "cr\u00e8me.md", ""); err != nil {
		t.Errorf("removing the stored decomposed name by its composed one: %v", err)
	}
	if err := b.Remove(ctx, decomposed, ""); err != nil {
		t.Errorf("removing the composed name by its decomposed one: %v", err)
	}
	if got := b.Documents(); len(got) != 0 {
		t.Errorf("documents %+v, want none", got)
	}
}

// A folder whose file is named with decomposed accents (as macOS writes names)
// keeps its document, named in NFC, through a prune: the file is the document's.
func TestPruneKeepsADecomposedFileName(t *testing.T) {
	ctx := testCtx(t)
	t.Chdir(t.TempDir())
	writeFile(t, "docs/cafe\u0301.md", "# Menu\n\nEspresso.", 0o644)
	f := newFixture(t)
	b := f.base(t, "docs")
	for range 2 {
		res, err := knowledge.AddFolder(ctx, b, []string{"docs"}, knowledge.FolderOptions{Prune: true})
		if err != nil || len(res.Removed) != 0 {
			t.Fatalf("AddFolder with prune: %+v %v, want nothing removed", res, err)
		}
	}
	if got := b.Documents(); len(got) != 1 || got[0].Source != "docs/caf\u00e9.md" {
		t.Errorf("documents %+v, want the one file, named in NFC", got)
	}
}
