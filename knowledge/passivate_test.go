package knowledge_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/vectorstore"
)

// testClock is a clock the test moves.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(t0.UnixNano())
	return c
}

func (c *testClock) Now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *testClock) Add(d time.Duration) { c.ns.Add(int64(d)) }
func withClock(c *testClock) func(*knowledge.Config) {
	return func(cfg *knowledge.Config) { cfg.Now = c.Now }
}

// callCountingStore counts the items upserted and deleted, and the searches.
type callCountingStore struct {
	vectorstore.Store
	upserted, deleted, searches atomic.Int64
}

func (s *callCountingStore) Upsert(ctx context.Context, coll string, items []vectorstore.Item) error {
	s.upserted.Add(int64(len(items)))
	return s.Store.Upsert(ctx, coll, items)
}

func (s *callCountingStore) Delete(ctx context.Context, coll string, ids []string) error {
	s.deleted.Add(int64(len(ids)))
	return s.Store.Delete(ctx, coll, ids)
}

func (s *callCountingStore) Search(ctx context.Context, coll string, q vectorstore.Query) ([]vectorstore.Hit, error) {
	s.searches.Add(1)
	return s.Store.Search(ctx, coll, q)
}

func (s *callCountingStore) calls() [3]int64 {
	return [3]int64{s.upserted.Load(), s.deleted.Load(), s.searches.Load()}
}

// passivationFixture is a fixture whose store counts its calls.
func passivationFixture(t *testing.T, tweak ...func(*knowledge.Config)) (*fixture, *callCountingStore) {
	t.Helper()
	store := &callCountingStore{}
	f := newFixture(t, append([]func(*knowledge.Config){func(c *knowledge.Config) {
		store.Store = c.Vectors
		c.Vectors = store
	}}, tweak...)...)
	return f, store
}

func docText(base string, i int) string {
	return fmt.Sprintf("# %s guide %d\n\nThe %s team keeps otters in pond %d.\n\n## Care\n\nFeed the beavers of pond %d at dawn.", base, i, base, i, i)
}

// hitsOf is what a search answered: its chunks and their scores.
func hitsOf(t *testing.T, b *knowledge.Base, text string) []string {
	t.Helper()
	var out []string
	for _, h := range search(t, b, knowledge.Query{Text: text, Mode: knowledge.ModeVector, Limit: 5}).Hits {
		out = append(out, fmt.Sprintf("%s %.6f", h.ChunkID, h.Score))
	}
	return out
}

// A knowledge base unused for IdleTimeout is released, and folded again from its
// events on its next use: the same documents and search results, and no call to
// the vector store to load it, whose vectors it trusts (it holds them since the
// release): nothing written again. What is added after is written as usual.
func TestIdleBasesAreReleasedAndLoadAgainWithoutWritingTheirVectors(t *testing.T) {
	clock := newTestClock()
	f, store := passivationFixture(t, withClock(clock), func(c *knowledge.Config) { c.IdleTimeout = time.Minute })
	docs, wiki := f.base(t, "docs"), f.base(t, "wiki")
	for i := range 3 {
		addText(t, docs, fmt.Sprintf("d%d.md", i), docText("docs", i))
	}
	addText(t, wiki, "w.md", docText("wiki", 9))
	wantDocs, wantHits := docs.Documents(), hitsOf(t, docs, "beavers of pond 1")
	clock.Add(30 * time.Second)
	if n := f.bases.ReleaseIdle(); n != 0 || f.bases.LoadedBases() != 2 {
		t.Fatalf("before the idle timeout: released %d, %d loaded; want 0 and 2", n, f.bases.LoadedBases())
	}
	clock.Add(31 * time.Second)
	if n := f.bases.ReleaseIdle(); n != 2 || f.bases.LoadedBases() != 0 {
		t.Fatalf("past the idle timeout: released %d, %d loaded; want 2 and 0", n, f.bases.LoadedBases())
	}
	before := store.calls()
	again := f.base(t, "docs")
	if again == docs {
		t.Fatal("docs was not released")
	}
	if got := store.calls(); got != before {
		t.Errorf("loading a released base called the store (upserted, deleted, searches): %v, then %v; want no call", before, got)
	}
	if got := again.Documents(); !slices.Equal(got, wantDocs) {
		t.Errorf("documents loaded again:\n%+v\nwant\n%+v", got, wantDocs)
	}
	if got := hitsOf(t, again, "beavers of pond 1"); !slices.Equal(got, wantHits) {
		t.Errorf("search loaded again: %v; want %v", got, wantHits)
	}
	if u, d := store.upserted.Load()-before[0], store.deleted.Load()-before[1]; u != 0 || d != 0 {
		t.Errorf("loaded again: upserted %d vectors, deleted %d; want none", u, d)
	}
	res := addText(t, again, "d3.md", docText("docs", 3))
	if u := store.upserted.Load() - before[0]; u != int64(res.Chunks) {
		t.Errorf("a document added after the load upserted %d vectors; want its %d", u, res.Chunks)
	}
	if hits := search(t, again, knowledge.Query{Text: "beavers of pond 3", Mode: knowledge.ModeVector, Limit: 1}).Hits; len(hits) != 1 || hits[0].Source != "d3.md" {
		t.Errorf("the document added after the load: %+v", hits)
	}
	if n := f.bases.VectorBacklog(); n != 0 {
		t.Errorf("vector backlog %d; want 0", n)
	}
}

// blockingEmbedder blocks its calls while block is set, until release is closed,
// after telling entered.
type blockingEmbedder struct {
	*countingEmbedder
	block   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (e *blockingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if e.block.Load() {
		e.entered <- struct{}{}
		select {
		case <-e.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return e.countingEmbedder.Embed(ctx, texts)
}

// A knowledge base held (Bases.Hold), or with an ingestion running (its
// embedding, which runs without the base's lock), is not released however long
// it is idle; once let go, it is, and nothing written is lost.
func TestBasesInUseAreNotReleased(t *testing.T) {
	clock := newTestClock()
	emb := &blockingEmbedder{entered: make(chan struct{}, 1), release: make(chan struct{})}
	f := newFixture(t, withClock(clock), func(c *knowledge.Config) {
		emb.countingEmbedder = c.Embedder.(*countingEmbedder)
		c.Embedder, c.IdleTimeout = emb, time.Minute
	})
	ctx := testCtx(t)
	addText(t, f.base(t, "held"), "a.md", docText("held", 1))
	addText(t, f.base(t, "busy"), "a.md", docText("busy", 1))
	_, release, err := f.bases.Hold(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	busy := f.base(t, "busy")
	emb.block.Store(true)
	added := make(chan error, 1)
	go func() {
		_, err := busy.AddText(ctx, "b.md", docText("busy", 2), "")
		added <- err
	}()
	select {
	case <-emb.entered:
	case <-ctx.Done():
		t.Fatal("the ingestion never reached the embedder")
	}
	clock.Add(2 * time.Minute)
	if n := f.bases.ReleaseIdle(); n != 0 || f.bases.LoadedBases() != 2 {
		t.Fatalf("one base held, one ingesting: released %d, %d loaded; want 0 and 2", n, f.bases.LoadedBases())
	}
	emb.block.Store(false)
	close(emb.release)
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	release()
	release()
	clock.Add(2 * time.Minute)
	if n := f.bases.ReleaseIdle(); n != 2 || f.bases.LoadedBases() != 0 {
		t.Fatalf("let go and idle: released %d, %d loaded; want 2 and 0", n, f.bases.LoadedBases())
	}
	if got := len(f.base(t, "busy").Documents()); got != 2 {
		t.Fatalf("busy loaded again: %d documents; want 2", got)
	}
}

// A node that serves many knowledge bases keeps at most MaxBases of them in
// memory: the least recently used goes first, and is folded again on its next use
// with its documents all there and found by vector, without writing its vectors
// again.
func TestBasesPastMaxBasesAreReleasedLeastRecentlyUsedFirst(t *testing.T) {
	f, store := passivationFixture(t, func(c *knowledge.Config) { c.MaxBases, c.IdleTimeout = 2, -1 })
	a := f.base(t, "a")
	addText(t, a, "a.md", docText("a", 1))
	b := f.base(t, "b")
	addText(t, b, "b.md", docText("b", 2))
	f.base(t, "a") // a used after b: b is the least recently used
	c := f.base(t, "c")
	addText(t, c, "c.md", docText("c", 3))
	if n := f.bases.LoadedBases(); n != 2 {
		t.Fatalf("%d loaded; want MaxBases, 2", n)
	}
	if f.base(t, "a") != a || f.base(t, "c") != c {
		t.Fatal("a or c was released: b was the least recently used")
	}
	const bases = 12
	for i := range bases {
		addText(t, f.base(t, fmt.Sprintf("kb%02d", i)), "d.md", docText("kb", i))
		if n := f.bases.LoadedBases(); n > 2 {
			t.Fatalf("after %d more bases: %d loaded; want at most 2", i+1, n)
		}
	}
	upserted := store.upserted.Load()
	for i := range bases {
		kb := f.base(t, fmt.Sprintf("kb%02d", i))
		hits := search(t, kb, knowledge.Query{Text: fmt.Sprintf("beavers of pond %d", i), Mode: knowledge.ModeVector, Limit: 1}).Hits
		if len(kb.Documents()) != 1 || len(hits) != 1 || hits[0].Source != "d.md" {
			t.Fatalf("kb%02d loaded again: %d documents, hits %+v", i, len(kb.Documents()), hits)
		}
	}
	if got := store.upserted.Load() - upserted; got != 0 {
		t.Fatalf("loading the released bases again upserted %d vectors; want none", got)
	}
}

// A caller that got a knowledge base before it was released writes through it:
// the base loaded in its place shows the write at its next use.
func TestAWriteThroughAReleasedBaseIsSeen(t *testing.T) {
	f := newFixture(t, func(c *knowledge.Config) { c.MaxBases, c.IdleTimeout = 1, -1 })
	old := f.base(t, "x")
	addText(t, old, "one.md", docText("x", 1))
	f.base(t, "y") // releases x
	loaded := f.base(t, "x")
	if loaded == old {
		t.Fatal("x was not released past the bound")
	}
	addText(t, old, "two.md", docText("x", 2))
	b := f.base(t, "x")
	if b != loaded {
		t.Fatal("x released by its own open")
	}
	if got := len(b.Documents()); got != 2 {
		t.Fatalf("x after a write through its released instance: %d documents; want 2", got)
	}
	if n := f.bases.VectorBacklog(); n != 0 {
		t.Errorf("vector backlog %d; want 0", n)
	}
}

// Knowledge bases opened, written, searched and released at once lose nothing:
// every document of many goroutines over more bases than the bound is there after.
func TestBaseReleaseUnderConcurrentWrites(t *testing.T) {
	f := newFixture(t, func(c *knowledge.Config) { c.MaxBases, c.IdleTimeout = 2, -1 })
	ctx := testCtx(t)
	const workers, writes, bases = 6, 8, 5
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range writes {
				b, err := f.bases.Base(ctx, fmt.Sprintf("kb%d", (w+i)%bases))
				if err == nil {
					_, err = b.AddText(ctx, fmt.Sprintf("w%d-%d.md", w, i), docText("kb", w*100+i), "")
				}
				if err == nil {
					_, err = b.Search(ctx, knowledge.Query{Text: "otters", Limit: 3})
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for i := range bases {
		total += len(f.base(t, fmt.Sprintf("kb%d", i)).Documents())
	}
	if total != workers*writes {
		t.Fatalf("%d documents; want %d", total, workers*writes)
	}
	if n := f.bases.VectorBacklog(); n != 0 {
		t.Errorf("vector backlog %d; want 0", n)
	}
}
