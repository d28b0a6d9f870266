package knowledge_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// plainLog is a log without eventlog.Compacting: the stream as it grew before.
type plainLog struct{ eventlog.Log }

func streamSize(t testing.TB, log eventlog.Log, name string) (n, bytes int) {
	t.Helper()
	for _, e := range events(t, log, name) {
		n++
		bytes += len(e.Payload)
	}
	return n, bytes
}

// reingest adds docs documents rounds times, each round changing every one.
func reingest(t *testing.T, b *knowledge.Base, docs, round int) {
	t.Helper()
	for d := range docs {
		md := fmt.Sprintf("# Document %d\n\n## Revision\n\nRevision %d of document %d. %s", d, round, d,
			strings.Repeat(fmt.Sprintf("The harbour log of pier %d notes tide %d and wind %d. ", d, round, d*round), 12))
		if _, err := b.AddText(testCtx(t), fmt.Sprintf("docs/%03d.md", d), md, ""); err != nil {
			t.Fatalf("round %d, document %d: %v", round, d, err)
		}
	}
}

// TestCompactionBoundsTheStream re-ingests 300 documents 8 times. Without
// compaction the stream holds every version; with it, about one event per live
// document and a bounded tail, and a base folded from it anew (a restart, a base
// released when idle, another node) is the same base.
func TestCompactionBoundsTheStream(t *testing.T) {
	const docs, rounds = 300, 8
	before := newFixture(t, func(c *knowledge.Config) { c.Log = plainLog{c.Log} })
	f := newFixture(t)
	bb, b := before.base(t, "docs"), f.base(t, "docs")
	bound := func() int { return 2*docs + knowledge.CompactTail + knowledge.CompactMin + 2 }
	for round := range rounds {
		reingest(t, bb, docs, round)
		reingest(t, b, docs, round)
		if n, _ := streamSize(t, f.log, "docs"); n > bound() {
			t.Fatalf("after round %d the stream holds %d events for %d documents (bound %d)", round+1, n, docs, bound())
		}
	}
	// Remove a few documents: their events go too.
	for d := range 10 {
		for _, base := range []*knowledge.Base{bb, b} {
			if err := base.Remove(testCtx(t), fmt.Sprintf("docs/%03d.md", d), ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := b.Compact(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	nBefore, bytesBefore := streamSize(t, before.log, "docs")
	nAfter, bytesAfter := streamSize(t, f.log, "docs")
	live := len(b.Documents())
	t.Logf("%d live documents: %d events, %d payload bytes without compaction; %d events, %d bytes with it", live, nBefore, bytesBefore, nAfter, bytesAfter)
	if nBefore != docs*rounds+10 {
		t.Fatalf("without compaction the stream holds %d events, want %d", nBefore, docs*rounds+10)
	}
	if max := live + knowledge.CompactTail + 2; nAfter > max {
		t.Fatalf("after compaction the stream holds %d events for %d live documents, want at most %d", nAfter, live, max)
	}
	var liveBytes int
	for _, e := range events(t, f.log, "docs") {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if in, ok := p.(*messages.KBDocumentIngested); ok {
			if d, ok := b.Chunks(in.Source); ok && len(d) > 0 && d[0].ChunkID == in.Chunks[0].ChunkID {
				liveBytes += len(e.Payload)
			}
		}
	}
	if extra := bytesAfter - liveBytes; extra*live > liveBytes*(knowledge.CompactTail+2) {
		t.Fatalf("after compaction %d bytes, %d of them the live documents': more than the tail's share left", bytesAfter, liveBytes)
	}
	infos, err := f.log.Sessions(testCtx(t), eventlog.Filter{Prefix: knowledge.Stream("docs")})
	if err != nil || len(infos) != 1 || infos[0].Events != nAfter {
		t.Fatalf("the log's summary of the stream: %+v, %v; want %d events", infos, err, nAfter)
	}

	// A base folded anew from the compacted stream, without embedding anything.
	emb := &countingEmbedder{Embedder: llm.HashingEmbedder{}}
	bs, err := knowledge.Open(knowledge.Config{Log: f.log, Vectors: f.store, Embedder: emb, EmbedderName: "hashing", Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bs.Close() })
	again, err := bs.Base(testCtx(t), "docs")
	if err != nil {
		t.Fatal(err)
	}
	wantDocs, gotDocs := b.Documents(), again.Documents()
	if emb.calls.Load() != 0 {
		t.Fatalf("folding the compacted stream embedded %d times", emb.calls.Load())
	}
	// The same documents, at the same seqs, as without compaction.
	if fmt.Sprint(gotDocs) != fmt.Sprint(wantDocs) || fmt.Sprint(bb.Documents()) != fmt.Sprint(wantDocs) {
		t.Fatalf("documents folded anew differ:\n got %v\nwant %v", gotDocs, wantDocs)
	}
	for _, q := range []string{"harbour log of pier 42", "tide 7 and wind", "Revision 3 of document 250"} {
		w, g := search(t, b, knowledge.Query{Text: q}), search(t, again, knowledge.Query{Text: q})
		if fmt.Sprint(w.Hits) != fmt.Sprint(g.Hits) {
			t.Fatalf("search %q: folded anew %v, want %v", q, sources(g.Hits), sources(w.Hits))
		}
	}
	// Writes go on after the compaction, from either instance.
	addText(t, again, "docs/new.md", "# New\n\nA document added after the compaction.")
	if err := b.Refresh(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got := len(b.Documents()); got != live+1 {
		t.Fatalf("after a write by another instance: %d documents, want %d", got, live+1)
	}
}

// TestCompactionUnderConcurrentFolds folds the base anew, again and again, in
// another instance while one re-ingests its documents and compacts; and keeps an
// instance folded before the compactions, which catches up after them: each
// sees every document, once.
func TestCompactionUnderConcurrentFolds(t *testing.T) {
	const docs = 100
	f := newFixture(t)
	b := f.base(t, "docs")
	reingest(t, b, docs, 0)
	open := func() (*knowledge.Bases, *knowledge.Base) {
		bs, err := knowledge.Open(knowledge.Config{Log: f.log, Vectors: f.store, Embedder: llm.HashingEmbedder{}, EmbedderName: "hashing",
			Now: func() time.Time { return t0 }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bs.Close() })
		base, err := bs.Base(testCtx(t), "docs")
		if err != nil {
			t.Fatal(err)
		}
		return bs, base
	}
	_, early := open()
	done := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		for {
			select {
			case <-done:
				return
			default:
			}
			bs, err := knowledge.Open(knowledge.Config{Log: f.log, Vectors: f.store, Embedder: llm.HashingEmbedder{}, EmbedderName: "hashing",
				Now: func() time.Time { return t0 }})
			if err != nil {
				errs <- err
				return
			}
			base, err := bs.Base(testCtx(t), "docs")
			if err == nil && len(base.Documents()) != docs {
				err = fmt.Errorf("a fold during the compactions found %d documents, want %d", len(base.Documents()), docs)
			}
			_ = bs.Close()
			if err != nil {
				errs <- err
				return
			}
		}
	}()
	for round := 1; round < 6; round++ {
		reingest(t, b, docs, round)
	}
	close(done)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if n, _ := streamSize(t, f.log, "docs"); n >= 5*docs {
		t.Fatalf("the stream holds %d events: it was not compacted", n)
	}
	if err := early.Refresh(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(early.Documents()) != fmt.Sprint(b.Documents()) {
		t.Fatalf("an instance folded before the compactions, caught up:\n%v\nwant %v", early.Documents(), b.Documents())
	}
	// It writes after them: at the stream's next seq, not into a hole.
	addText(t, early, "docs/late.md", "# Late\n\nWritten by the instance folded early.")
	if err := b.Refresh(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if len(b.Documents()) != docs+1 {
		t.Fatalf("%d documents after the late write, want %d", len(b.Documents()), docs+1)
	}
}

// TestCompactionLeavesNoStaleVectorsInAnotherNodesStore: a node of a cluster
// keeps its own vector store. One that folded the base, then stopped while the
// owner replaced every document and compacted the stream, must not keep the
// vectors of the chunks replaced when it folds the base again: the events that
// named them are gone, and they would crowd its searches' candidates.
func TestCompactionLeavesNoStaleVectorsInAnotherNodesStore(t *testing.T) {
	const docs, kept = 300, 50
	f := newFixture(t)
	owner := f.base(t, "docs")
	reingest(t, owner, docs, 0)
	otherStore := openStore(t, "")
	open := func() (*knowledge.Bases, *knowledge.Base) {
		bs, err := knowledge.Open(knowledge.Config{Log: f.log, Vectors: otherStore, Embedder: llm.HashingEmbedder{}, EmbedderName: "hashing",
			Now: func() time.Time { return t0 }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bs.Close() })
		b, err := bs.Base(testCtx(t), "docs")
		if err != nil {
			t.Fatal(err)
		}
		return bs, b
	}
	bs, _ := open()
	if got := len(storeIDs(t, otherStore, "docs", 256)); got == 0 {
		t.Fatal("the other node's store holds no vector after its fold")
	}
	if err := bs.Close(); err != nil {
		t.Fatal(err)
	}
	// The base shrinks to fewer chunks than the other node's store holds.
	for d := kept; d < docs; d++ {
		if err := owner.Remove(testCtx(t), fmt.Sprintf("docs/%03d.md", d), ""); err != nil {
			t.Fatal(err)
		}
	}
	for round := 1; round < 5; round++ {
		reingest(t, owner, kept, round)
	}
	if n, _ := streamSize(t, f.log, "docs"); n >= docs {
		t.Fatalf("the stream holds %d events: it was not compacted", n)
	}
	_, other := open()
	var live []string
	for _, d := range other.Documents() {
		hits, _ := other.Chunks(d.Source)
		for _, h := range hits {
			live = append(live, h.ChunkID)
		}
	}
	slices.Sort(live)
	if got := storeIDs(t, otherStore, "docs", 256); !slices.Equal(got, live) {
		t.Fatalf("the other node's store holds %d vectors, the base %d live chunks", len(got), len(live))
	}
}

// halvingLog deletes the events of a compaction in two steps, the later half
// first, and folds the base anew before and between them, as a reader of the
// ClickHouse log may while a mutation has rewritten some of the stream's parts
// and not the others (eventlog.Compacting).
type halvingLog struct {
	*sqlite.Log
	fold func() string
	errs []error
}

func (h *halvingLog) DeleteEvents(ctx context.Context, stream string, seqs []uint64) (int, error) {
	before := h.fold()
	upper, err := h.Log.DeleteEvents(ctx, stream, seqs[len(seqs)/2:])
	if err != nil {
		return upper, err
	}
	if mid := h.fold(); mid != before {
		h.errs = append(h.errs, fmt.Errorf("deleting %d events, a fold between the halves found\n%s\nbefore the deletion\n%s", len(seqs), mid, before))
	}
	lower, err := h.Log.DeleteEvents(ctx, stream, seqs[:len(seqs)/2])
	return upper + lower, err
}

// TestCompactionSeenInPartsKeepsTheDocuments: removed documents' events are
// deleted along with the others, but a fold that reads a removal's deletion
// and not that of the ingestion before it would find the document live; a
// removal goes at a later compaction, once nothing of its document is left.
func TestCompactionSeenInPartsKeepsTheDocuments(t *testing.T) {
	const docs, gone = 60, 20
	h := &halvingLog{Log: openLog(t, t.TempDir())}
	h.fold = func() string {
		bs, err := knowledge.Open(knowledge.Config{Log: plainLog{h.Log}, Vectors: openStore(t, ""), Embedder: llm.HashingEmbedder{}, EmbedderName: "hashing",
			Now: func() time.Time { return t0 }})
		if err != nil {
			t.Fatal(err)
		}
		defer bs.Close()
		b, err := bs.Base(testCtx(t), "docs")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range b.Documents() {
			out = append(out, d.Source)
		}
		return strings.Join(out, " ")
	}
	f := newFixture(t, func(c *knowledge.Config) { c.Log = h })
	b := f.base(t, "docs")
	for d := range gone {
		addText(t, b, fmt.Sprintf("gone/%03d.md", d), fmt.Sprintf("# Gone %d\n\nA document removed soon.", d))
	}
	reingest(t, b, docs, 0)
	for d := range gone {
		if err := b.Remove(testCtx(t), fmt.Sprintf("gone/%03d.md", d), ""); err != nil {
			t.Fatal(err)
		}
	}
	for round := 1; round < 4; round++ {
		reingest(t, b, docs, round)
		if _, err := b.Compact(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(h.errs...); err != nil {
		t.Fatal(err)
	}
	if n, _ := streamSize(t, h.Log, "docs"); n > docs+knowledge.CompactTail+2 {
		t.Fatalf("the stream holds %d events for %d documents: the removals stayed", n, docs)
	}
}

// blockingLog holds every DeleteEvents until the test closes release, as a
// ClickHouse mutation on a large table holds it for seconds to minutes; started
// hears of each call, with its seqs.
type blockingLog struct {
	*sqlite.Log
	started chan []uint64
	release chan struct{}
}

func (l *blockingLog) DeleteEvents(ctx context.Context, stream string, seqs []uint64) (int, error) {
	l.started <- slices.Clone(seqs)
	select {
	case <-l.release:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return l.Log.DeleteEvents(ctx, stream, seqs)
}

// TestCompactionLetsSearchesAndWritesGoOn: while the log deletes a
// compaction's events, the base's searches answer and its writes are stored
// (the compaction does not hold the base's lock meanwhile), and no second
// compaction of the base starts, though the writes make one due, nor is the
// base released to make room for another; after the
// deletion, the base holds every document, as a fold from scratch finds them,
// and the vector store holds its live chunks.
func TestCompactionLetsSearchesAndWritesGoOn(t *testing.T) {
	const docs, rounds = 5, 20
	bl := &blockingLog{Log: openLog(t, t.TempDir()), started: make(chan []uint64, 16), release: make(chan struct{})}
	released := false
	t.Cleanup(func() {
		if !released {
			close(bl.release)
		}
	})
	f := newFixture(t, func(c *knowledge.Config) { c.Log, c.MaxBases = bl, 1 })
	b := f.base(t, "docs")
	for round := range rounds { // 100 events, 31 superseded: no compaction due yet
		reingest(t, b, docs, round)
	}
	if len(bl.started) != 0 {
		t.Fatal("a compaction ran before one was due")
	}
	hang := func(what string, done <-chan error) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s during the compaction: %v", what, err)
			}
		case <-time.After(30 * time.Second): // a hang guard only
			t.Fatalf("%s hung while the log deleted a compaction's events", what)
		}
	}
	type compacted struct {
		n   int
		err error
	}
	first := make(chan compacted, 1)
	go func() {
		n, err := b.Compact(testCtx(t))
		first <- compacted{n, err}
	}()
	var seqs []uint64
	select {
	case seqs = <-bl.started:
	case <-time.After(30 * time.Second): // a hang guard only
		t.Fatal("Compact deleted nothing")
	}

	// A search answers, and writes are stored: a new document, a changed one,
	// and enough of them to make another compaction due (141 events, 68
	// superseded), which must not start: it would wait for the first.
	searched := make(chan error, 1)
	go func() {
		r, err := b.Search(testCtx(t), knowledge.Query{Text: "harbour log of pier 3"})
		if err == nil && (len(r.Hits) == 0 || r.Hits[0].Source != "docs/003.md") {
			err = fmt.Errorf("hits %v, want docs/003.md first", sources(r.Hits))
		}
		searched <- err
	}()
	hang("a search", searched)
	wrote := make(chan error, 1)
	go func() {
		var err error
		for i := 0; i < 40 && err == nil; i++ {
			_, err = b.AddText(testCtx(t), fmt.Sprintf("new/%02d.md", i%4), fmt.Sprintf("# New %d\n\nWritten during the compaction, version %d.", i%4, i), "")
		}
		if err == nil {
			_, err = b.AddText(testCtx(t), "docs/000.md", "# Document 0\n\nChanged during the compaction.", "")
		}
		wrote <- err
	}()
	hang("writes", wrote)
	if r := search(t, b, knowledge.Query{Text: "Changed during the compaction"}); len(r.Hits) == 0 || r.Hits[0].Source != "docs/000.md" {
		t.Fatalf("the document changed during the compaction is not found: %v", sources(r.Hits))
	}
	// The base is not released meanwhile (over MaxBases), lest its next use
	// load another instance of it, which could compact too.
	f.base(t, "other")
	f.bases.ReleaseIdle()
	if !f.bases.Loaded("docs") {
		t.Fatal("the base was released while its compaction ran")
	}
	// A second compaction does not start while the first runs.
	if n, err := b.Compact(testCtx(t)); n != 0 || err != nil {
		t.Fatalf("a second Compact during the first: %d, %v; want 0, nil", n, err)
	}
	if len(bl.started) != 0 {
		t.Fatal("a second compaction started while the first deleted")
	}

	close(bl.release)
	released = true
	var c compacted
	select {
	case c = <-first:
	case <-time.After(30 * time.Second): // a hang guard only
		t.Fatal("Compact did not return after the deletion")
	}
	if c.err != nil || c.n != len(seqs) {
		t.Fatalf("Compact: %d, %v; want %d deleted", c.n, c.err, len(seqs))
	}
	want := []string{"docs/000.md", "docs/001.md", "docs/002.md", "docs/003.md", "docs/004.md", "new/00.md", "new/01.md", "new/02.md", "new/03.md"}
	var got []string
	for _, d := range b.Documents() {
		got = append(got, d.Source)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("documents after the compaction: %v, want %v", got, want)
	}
	// The next compaction lists only events still stored: the first one's
	// went out of the fold's trails.
	n, err := b.Compact(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if next := <-bl.started; n == 0 || n != len(next) || slices.ContainsFunc(next, func(seq uint64) bool { return slices.Contains(seqs, seq) }) {
		t.Fatalf("the next compaction deleted %d of the events %v; the first deleted %v", n, next, seqs)
	}
	again := func() *knowledge.Base {
		bs, err := knowledge.Open(knowledge.Config{Log: plainLog{bl.Log}, Vectors: openStore(t, ""), Embedder: llm.HashingEmbedder{}, EmbedderName: "hashing",
			Now: func() time.Time { return t0 }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bs.Close() })
		base, err := bs.Base(testCtx(t), "docs")
		if err != nil {
			t.Fatal(err)
		}
		return base
	}()
	if fmt.Sprint(again.Documents()) != fmt.Sprint(b.Documents()) {
		t.Fatalf("a fold from scratch finds\n%v\nthe base holds\n%v", again.Documents(), b.Documents())
	}
	var live []string
	for _, d := range b.Documents() {
		hits, _ := b.Chunks(d.Source)
		for _, h := range hits {
			live = append(live, h.ChunkID)
		}
	}
	slices.Sort(live)
	if ids := storeIDs(t, f.store, "docs", 256); !slices.Equal(ids, live) {
		t.Fatalf("the store holds %d vectors, the base %d live chunks", len(ids), len(live))
	}
	if n, _ := streamSize(t, bl.Log, "docs"); n > len(want)+knowledge.CompactTail+2 {
		t.Fatalf("the stream holds %d events for %d documents", n, len(want))
	}
}
