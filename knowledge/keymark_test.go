package knowledge_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/messages"
)

// clientKeys is Config.KeepsRequest as a node sets it: its HTTP keys.
func clientKeys(c *knowledge.Config) {
	c.KeepsRequest = func(key string) bool { return strings.HasPrefix(key, "http/") }
}

// keyMarks returns the keys of the base's key marks (messages.KBKeyPart), in
// the stream's order.
func keyMarks(t *testing.T, f *fixture) []string {
	t.Helper()
	var out []string
	for _, e := range events(t, f.log, "docs") {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if in, ok := p.(*messages.KBDocumentIngested); ok && in.Part == messages.KBKeyPart {
			if len(in.Chunks) != 0 || in.Status != knowledge.StatusUnchanged || e.Version != 2 {
				t.Errorf("the mark of %q: %d chunks, status %q, version %d; want none, unchanged, 2", in.Key, len(in.Chunks), in.Status, e.Version)
			}
			out = append(out, in.Key)
		}
	}
	return out
}

// TestAnUnchangedDocumentUnderAClientsKeyKeepsTheKeysRequest: a document sent
// again unchanged under a client's key (Config.KeepsRequest) writes the key's
// mark, once: folded anew (a restart, another node), the base refuses the key
// with another document (ErrKeyReused), writing nothing, and answers the
// original request as it was first answered (unchanged). A key that is not a
// client's (none, a made-up one) writes nothing, as before.
func TestAnUnchangedDocumentUnderAClientsKeyKeepsTheKeysRequest(t *testing.T) {
	f := newFixture(t, clientKeys)
	b := f.base(t, "docs")
	ctx := testCtx(t)
	const a = "# A\n\nThe document a."
	if _, err := b.AddText(ctx, "docs/a.md", a, "http/k1"); err != nil {
		t.Fatal(err)
	}
	first, err := b.AddText(ctx, "docs/a.md", a, "http/k2")
	if err != nil || first.Status != knowledge.StatusUnchanged {
		t.Fatalf("the stored document under another key: %+v, %v; want unchanged", first, err)
	}
	for _, key := range []string{"http/k2", "", knowledge.AutoKeyPrefix + "x", "tool-call-key"} {
		if _, err := b.AddText(ctx, "docs/a.md", a, key); err != nil {
			t.Fatal(err)
		}
	}
	if got := keyMarks(t, f); !slices.Equal(got, []string{"http/k2"}) {
		t.Fatalf("marks %q; want one of http/k2", got)
	}
	seq := lastSeq(t, f)

	again := reopen(t, f, func() time.Time { return t0 })
	if _, err := again.AddText(ctx, "docs/b.md", "# B\n\nAnother document.", "http/k2"); !errors.Is(err, knowledge.ErrKeyReused) {
		t.Fatalf("after a restart, the key of an unchanged write with another document: %v; want ErrKeyReused", err)
	}
	if _, err := again.AddText(ctx, "docs/a.md", "# A\n\nAnother version of a.", "http/k2"); !errors.Is(err, knowledge.ErrKeyReused) {
		t.Fatalf("after a restart, the key with another version of its document: %v; want ErrKeyReused", err)
	}
	if err := again.Remove(ctx, "docs/a.md", "http/k2"); !errors.Is(err, knowledge.ErrKeyReused) {
		t.Fatalf("after a restart, the key to remove its document: %v; want ErrKeyReused", err)
	}
	got, err := again.AddText(ctx, "docs/a.md", a, "http/k2")
	if err != nil || got != first {
		t.Fatalf("after a restart, the original request again: %+v, %v; want %+v", got, err, first)
	}
	if s := lastSeq(t, f); s != seq {
		t.Fatalf("wrote events %d to %d", seq+1, s)
	}
	if docs := again.Documents(); len(docs) != 1 || docs[0].Source != "docs/a.md" || docs[0].Seq != 1 {
		t.Fatalf("documents %+v; want a.md of seq 1", docs)
	}
}

// TestAKeyMarkOutlivesCompactionForKeyRetention: compaction keeps a key's mark
// as the events of writes under keys, for KeyRetention in the stream's time,
// also once a later version superseded its document: the key's retry is
// answered as it was and the key with another request refused, after a
// restart. Past KeyRetention the mark goes.
func TestAKeyMarkOutlivesCompactionForKeyRetention(t *testing.T) {
	clock := newTestClock()
	f := newFixture(t, withClock(clock), clientKeys)
	b := f.base(t, "docs")
	ctx := testCtx(t)
	addText(t, b, "docs/first.md", "# First\n\nThe base's first document.")
	const v1 = "# A\n\nThe first version of a."
	addText(t, b, "docs/a.md", v1)
	first, err := b.AddText(ctx, "docs/a.md", v1, "http/k2")
	if err != nil || first.Status != knowledge.StatusUnchanged {
		t.Fatalf("%+v, %v", first, err)
	}
	addText(t, b, "docs/a.md", "# A\n\nThe second version of a.")
	churn(t, b, 0, 2*knowledge.CompactTail)
	if _, err := b.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(events(t, f.log, "docs")); n > knowledge.CompactTail+10 {
		t.Fatalf("after compaction the stream holds %d events", n)
	}
	if got := keyMarks(t, f); !slices.Equal(got, []string{"http/k2"}) {
		t.Fatalf("after compaction, marks %q; want the one of http/k2", got)
	}

	again := reopen(t, f, clock.Now)
	seq := lastSeq(t, f)
	if _, err := again.AddText(ctx, "docs/b.md", "# B\n\nAnother document.", "http/k2"); !errors.Is(err, knowledge.ErrKeyReused) {
		t.Fatalf("after compaction and a restart, the key with another document: %v; want ErrKeyReused", err)
	}
	got, err := again.AddText(ctx, "docs/a.md", v1, "http/k2")
	if err != nil || got != first {
		t.Fatalf("after compaction and a restart, the key's retry: %+v, %v; want %+v", got, err, first)
	}
	if s := lastSeq(t, f); s != seq {
		t.Fatalf("wrote events %d to %d", seq+1, s)
	}

	clock.Add(knowledge.KeyRetention)
	churn(t, again, 1000, 1)
	if _, err := again.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if got := keyMarks(t, f); len(got) != 0 {
		t.Fatalf("marks %q outlived KeyRetention", got)
	}
}

// keyMarkGolden is a stream this build writes: a.md ingested under http/k1,
// sent again unchanged under http/k2 (its key's mark), b.md added without a
// key. Regenerate with TROUPE_KB_GOLDEN=1 go test ./knowledge -run
// TestTheKeyMarkGoldenStream. The builds of decision rules 13 from before the
// mark fold it as a.md and b.md (the mark as nothing: a part that follows no
// first part).
const keyMarkGolden = "testdata/keymark-stream.json"

// TestTheKeyMarkGoldenStream folds the golden stream of a key's mark: it holds
// a.md and b.md, the mark changed no document, and it keeps its key's request.
func TestTheKeyMarkGoldenStream(t *testing.T) {
	ctx := testCtx(t)
	if os.Getenv("TROUPE_KB_GOLDEN") != "" {
		f := newFixture(t, clientKeys)
		b := f.base(t, "docs")
		if _, err := b.AddText(ctx, "docs/a.md", "# A\n\nThe document a.", "http/k1"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.AddText(ctx, "docs/a.md", "# A\n\nThe document a.", "http/k2"); err != nil {
			t.Fatal(err)
		}
		addText(t, b, "docs/b.md", "# B\n\nThe document b.")
		out, err := json.MarshalIndent(events(t, f.log, "docs"), "", "\t")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyMarkGolden, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(keyMarkGolden)
	if err != nil {
		t.Fatal(err)
	}
	var es []messages.Envelope
	if err := json.Unmarshal(raw, &es); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	if err := f.log.Append(ctx, es); err != nil {
		t.Fatal(err)
	}
	b := f.base(t, "docs")
	if got := keyMarks(t, f); !slices.Equal(got, []string{"http/k2"}) {
		t.Fatalf("the golden stream's marks %q; want one of http/k2", got)
	}
	docs := b.Documents()
	if len(docs) != 2 || docs[0].Source != "docs/a.md" || docs[0].Seq != 1 || docs[1].Source != "docs/b.md" || docs[1].Chunks != 1 {
		t.Fatalf("documents %+v; want a.md of seq 1 and b.md", docs)
	}
	if _, err := b.AddText(ctx, "docs/c.md", "# C\n\nAnother document.", "http/k2"); !errors.Is(err, knowledge.ErrKeyReused) {
		t.Fatalf("the mark's key with another document: %v; want ErrKeyReused", err)
	}
	got, err := b.AddText(ctx, "docs/a.md", "# A\n\nThe document a.", "http/k2")
	if err != nil || got.Status != knowledge.StatusUnchanged || got.Chunks != docs[0].Chunks || got.Tokens != docs[0].Tokens {
		t.Fatalf("the mark's key with its request: %+v, %v; want unchanged, as a.md", got, err)
	}
}

// TestAKeyMarkOfADocumentStillStoredGoesAfterKeyRetention: a key's mark is
// not its document's latest version, even when no later event of its source
// follows it: past KeyRetention compaction deletes it, and the document's own
// event stays, so that the stream holds about one event per live document
// whatever number of unchanged writes were sent under keys.
func TestAKeyMarkOfADocumentStillStoredGoesAfterKeyRetention(t *testing.T) {
	clock := newTestClock()
	f := newFixture(t, withClock(clock), clientKeys)
	b := f.base(t, "docs")
	ctx := testCtx(t)
	addText(t, b, "docs/first.md", "# First\n\nThe base's first document.")
	const a = "# A\n\nThe document a, never changed."
	addText(t, b, "docs/a.md", a)
	for _, key := range []string{"http/k1", "http/k2"} {
		if res, err := b.AddText(ctx, "docs/a.md", a, key); err != nil || res.Status != knowledge.StatusUnchanged {
			t.Fatalf("%+v, %v", res, err)
		}
	}
	churn(t, b, 0, 2*knowledge.CompactTail)
	clock.Add(knowledge.KeyRetention)
	churn(t, b, 1000, 1)
	if _, err := b.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if got := keyMarks(t, f); len(got) != 0 {
		t.Fatalf("marks %q outlived KeyRetention", got)
	}
	again := reopen(t, f, clock.Now)
	docs := again.Documents()
	if len(docs) != 3 || docs[0].Source != "docs/a.md" || docs[0].Seq != 2 {
		t.Fatalf("documents %+v; want a.md of seq 2, churn.md and first.md", docs)
	}
	if r := search(t, again, knowledge.Query{Text: "never changed", Limit: 1}); len(r.Hits) != 1 || r.Hits[0].Source != "docs/a.md" {
		t.Fatalf("search after compaction: %+v", r.Hits)
	}
}

// TestKeyMarksAloneAreCompacted: a client that sends its documents again,
// unchanged, under fresh keys each run writes only marks; the marks of a run
// KeyRetention past are compacted by the writes of a later one, with no
// other write, so the stream stays bounded.
func TestKeyMarksAloneAreCompacted(t *testing.T) {
	clock := newTestClock()
	f := newFixture(t, withClock(clock), clientKeys)
	b := f.base(t, "docs")
	ctx := testCtx(t)
	const a = "# A\n\nThe document a, synced every day."
	addText(t, b, "docs/a.md", a)
	const perRun = 2 * knowledge.CompactMin
	for run := range 3 {
		for i := range perRun {
			if res, err := b.AddText(ctx, "docs/a.md", a, fmt.Sprintf("http/run%d-%d", run, i)); err != nil || !res.Skipped() {
				t.Fatalf("run %d, write %d: %+v, %v", run, i, res, err)
			}
		}
		clock.Add(knowledge.KeyRetention + time.Minute)
	}
	if n := len(events(t, f.log, "docs")); n > 2*perRun+1 {
		t.Fatalf("after 3 runs of %d unchanged writes under fresh keys, the stream holds %d events; want those of the last KeyRetention only", perRun, n)
	}
}
