package knowledge_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/messages"
)

// churn re-adds docs/churn.md n times, without a key: events enough to put
// those before them out of compaction's tail.
func churn(t *testing.T, b *knowledge.Base, from, n int) {
	t.Helper()
	for i := range n {
		addText(t, b, "docs/churn.md", fmt.Sprintf("# Churn\n\nVersion %d of the churning document.", from+i))
	}
}

// reopen folds the base anew from its log and store, as a restart does.
func reopen(t *testing.T, f *fixture, now func() time.Time) *knowledge.Base {
	t.Helper()
	bs, err := knowledge.Open(knowledge.Config{Log: f.log, Vectors: f.store, Embedder: f.emb, EmbedderName: "hashing", Now: now,
		EmbedBackoff: time.Millisecond})
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

func lastSeq(t *testing.T, f *fixture) uint64 {
	t.Helper()
	es := events(t, f.log, "docs")
	return es[len(es)-1].Seq
}

// TestAKeyDecidesItsRetryAfterCompactionAndRestart writes under idempotency
// keys, supersedes those writes with later events, enough for compaction to
// reach them, compacts and folds the base anew (a restart): a retry under each
// key is answered as its write was and writes nothing. An ingestion's older
// bytes do not overwrite the newer version, nor bring back the document removed
// since; a removal's key does not remove the document added again since. Once
// the stream's time is KeyRetention past the keyed events, they go.
func TestAKeyDecidesItsRetryAfterCompactionAndRestart(t *testing.T) {
	clock := newTestClock()
	f := newFixture(t, withClock(clock))
	b := f.base(t, "docs")
	ctx := testCtx(t)
	// The first vectors' event, kept by every compaction (the anchor).
	addText(t, b, "docs/first.md", "# First\n\nThe base's first document.")

	const v1, v2 = "# A\n\nThe first version of a.", "# A\n\nThe second version of a."
	first, err := b.AddText(ctx, "docs/a.md", v1, "key-a")
	if err != nil || first.Status != knowledge.StatusAdded {
		t.Fatalf("first write of a: %+v, %v", first, err)
	}
	addText(t, b, "docs/a.md", v2)

	addText(t, b, "docs/b.md", "# B\n\nThe first version of b.")
	if err := b.Remove(ctx, "docs/b.md", "key-b-removed"); err != nil {
		t.Fatal(err)
	}
	const b2 = "# B\n\nb, added again."
	addText(t, b, "docs/b.md", b2)

	const c1 = "# C\n\nc, to be removed."
	if _, err := b.AddText(ctx, "docs/c.md", c1, "key-c"); err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(ctx, "docs/c.md", ""); err != nil {
		t.Fatal(err)
	}

	churn(t, b, 0, 2*knowledge.CompactTail)
	if _, err := b.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	churn(t, b, 1000, 2) // the removal of c goes at the next compaction
	if _, err := b.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(events(t, f.log, "docs")); n > knowledge.CompactTail+10 {
		t.Fatalf("after compaction the stream holds %d events", n)
	}

	again := reopen(t, f, clock.Now)
	seq := lastSeq(t, f)
	got, err := again.AddText(ctx, "docs/a.md", v1, "key-a")
	if err != nil || got != first {
		t.Fatalf("retry of a's first write after compaction and restart: %+v, %v; want %+v", got, err, first)
	}
	if err := again.Remove(ctx, "docs/b.md", "key-b-removed"); err != nil {
		t.Fatalf("retry of b's removal: %v", err)
	}
	cRetry, err := again.AddText(ctx, "docs/c.md", c1, "key-c")
	if err != nil || cRetry.Status != knowledge.StatusAdded {
		t.Fatalf("retry of c's write: %+v, %v", cRetry, err)
	}
	if s := lastSeq(t, f); s != seq {
		t.Fatalf("the retries wrote events %d to %d", seq+1, s)
	}
	docs := map[string]string{}
	for _, d := range again.Documents() {
		docs[d.Source] = d.Hash
	}
	if _, ok := docs["docs/c.md"]; ok {
		t.Fatal("the retry of c's write brought back c, removed since")
	}
	if _, ok := docs["docs/b.md"]; !ok {
		t.Fatal("the retry of b's removal removed b, added again since")
	}
	hits, ok := again.Chunks("docs/a.md")
	if !ok || len(hits) == 0 || !strings.Contains(hits[0].Content, "second version") {
		t.Fatalf("a after the retry of its first write: %+v", hits)
	}

	// KeyRetention later in the stream's time, the keyed events go.
	clock.Add(knowledge.KeyRetention)
	churn(t, again, 2000, 1)
	if _, err := again.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	for _, e := range events(t, f.log, "docs") {
		if k := eventKey(t, e); k != "" {
			t.Fatalf("the event of key %q (seq %d) outlived KeyRetention", k, e.Seq)
		}
	}
}

// eventKey is the idempotency key an event of the base carries, if any.
func eventKey(t *testing.T, e messages.Envelope) string {
	t.Helper()
	p, err := e.Decode()
	if err != nil {
		t.Fatal(err)
	}
	switch p := p.(type) {
	case *messages.KBDocumentIngested:
		return p.Key
	case *messages.KBDocumentRemoved:
		return p.Key
	}
	return ""
}

// TestAKeysAnswerOutlivesTheVersionItReplaced writes a version of a document
// under a key, replacing an earlier one: once compaction deleted the earlier
// version, a retry under the key, after a restart, still answers "replaced",
// the write's answer, not "added".
func TestAKeysAnswerOutlivesTheVersionItReplaced(t *testing.T) {
	f := newFixture(t)
	b := f.base(t, "docs")
	ctx := testCtx(t)
	addText(t, b, "docs/first.md", "# First\n\nThe base's first document.")
	addText(t, b, "docs/a.md", "# A\n\nThe first version of a.")
	const v2 = "# A\n\nThe second version of a."
	first, err := b.AddText(ctx, "docs/a.md", v2, "key-a2")
	if err != nil || first.Status != knowledge.StatusReplaced {
		t.Fatalf("second write of a: %+v, %v", first, err)
	}
	churn(t, b, 0, 2*knowledge.CompactTail)
	if _, err := b.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	for _, e := range events(t, f.log, "docs") {
		if e.Seq == 2 {
			t.Fatal("the first version of a outlived the compaction")
		}
	}
	again := reopen(t, f, func() time.Time { return t0 })
	seq := lastSeq(t, f)
	got, err := again.AddText(ctx, "docs/a.md", v2, "key-a2")
	if err != nil || got != first {
		t.Fatalf("retry after compaction and restart: %+v, %v; want %+v", got, err, first)
	}
	if s := lastSeq(t, f); s != seq {
		t.Fatalf("the retry wrote events %d to %d", seq+1, s)
	}
}

// deletesLog is the SQLite log recording how many events each compaction
// deletes.
type deletesLog struct {
	*sqlite.Log
	mu      sync.Mutex
	deletes []int
}

func (l *deletesLog) DeleteEvents(ctx context.Context, stream string, seqs []uint64) (int, error) {
	l.mu.Lock()
	l.deletes = append(l.deletes, len(seqs))
	l.mu.Unlock()
	return l.Log.DeleteEvents(ctx, stream, seqs)
}

// TestKeyedEventsKeptDoNotMakeSmallCompactions writes many versions of a
// document under keys, which compaction keeps, then more without: a compaction
// after a write deletes at least CompactMin events, where the keyed events
// counted as superseded would have made one after each write, of the few
// others past the tail.
func TestKeyedEventsKeptDoNotMakeSmallCompactions(t *testing.T) {
	var lg *deletesLog
	f := newFixture(t, func(c *knowledge.Config) {
		lg = &deletesLog{Log: c.Log.(*sqlite.Log)}
		c.Log = lg
	})
	b := f.base(t, "docs")
	ctx := testCtx(t)
	addText(t, b, "docs/first.md", "# First\n\nThe base's first document.")
	for i := range 3 * knowledge.CompactTail {
		if _, err := b.AddText(ctx, "docs/a.md", fmt.Sprintf("# A\n\nVersion %d of a.", i), fmt.Sprintf("key-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	churn(t, b, 0, knowledge.CompactTail+knowledge.CompactMin+8)
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if len(lg.deletes) == 0 {
		t.Fatal("no compaction")
	}
	for _, n := range lg.deletes {
		if n < knowledge.CompactMin {
			t.Fatalf("compactions deleted %v events: one under CompactMin", lg.deletes)
		}
	}
}

// TestAutoKeysAreCompactedWithTheTail: the keys a node makes up for writes
// sent without one (AutoKeyPrefix) keep their events no longer than the
// CompactTail latest, as writes without a key.
func TestAutoKeysAreCompactedWithTheTail(t *testing.T) {
	f := newFixture(t)
	b := f.base(t, "docs")
	ctx := testCtx(t)
	addText(t, b, "docs/first.md", "# First\n\nThe base's first document.")
	for i := range 3 * knowledge.CompactTail {
		if _, err := b.AddText(ctx, "docs/a.md", fmt.Sprintf("# A\n\nVersion %d of a.", i), fmt.Sprintf("%s%d", knowledge.AutoKeyPrefix, i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(events(t, f.log, "docs")); n > knowledge.CompactTail+2 {
		t.Fatalf("after compaction the stream holds %d events", n)
	}
}
