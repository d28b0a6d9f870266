package knowledge_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/messages"
)

// boundedLog is the SQLite log refusing an event whose payload is over max
// bytes, as a log refuses a value over what it stores (SQLite: "string or blob
// too big", past SQLITE_MAX_LENGTH).
type boundedLog struct {
	*sqlite.Log
	max int
}

func (l boundedLog) Append(ctx context.Context, events []messages.Envelope) error {
	for _, e := range events {
		if len(e.Payload) > l.max {
			return fmt.Errorf("eventlog/sqlite: append %s seq %d: string or blob too big (%d bytes)", e.SessionID, e.Seq, len(e.Payload))
		}
	}
	return l.Log.Append(ctx, events)
}

// boundedEvents makes the fixture's log refuse events over max bytes, and the
// knowledge bases keep theirs under it.
func boundedEvents(max int) func(*knowledge.Config) {
	return func(c *knowledge.Config) {
		c.Log, c.MaxEventBytes = boundedLog{Log: c.Log.(*sqlite.Log), max: max}, max
	}
}

// bigGuide is a Markdown document of n paragraphs whose chunk set is some
// 130 KB of JSON for n = 600: '<', '>' and '&' take 6 bytes each in it.
func bigGuide(n int) string {
	var sb strings.Builder
	sb.WriteString("# Guide\n\n")
	for i := range n {
		fmt.Fprintf(&sb, "Paragraph %d says that a < b && c > d holds for item %d.\n\n", i, i)
	}
	return sb.String()
}

// ingestedParts returns the kb.document_ingested events of source in base
// name's stream.
func ingestedParts(t *testing.T, f *fixture, name, source string) []*messages.KBDocumentIngested {
	t.Helper()
	var out []*messages.KBDocumentIngested
	for _, e := range events(t, f.log, name) {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if in, ok := p.(*messages.KBDocumentIngested); ok && in.Source == source {
			if len(e.Payload) > 32<<10 {
				t.Errorf("an event of %s holds %d bytes, over the bound of %d", source, len(e.Payload), 32<<10)
			}
			out = append(out, in)
		}
	}
	return out
}

// A document whose chunk set is too large for one event of the log is recorded
// in several, each under the bound, and read back whole: by the base that wrote
// it, by a restart's fold, after a compaction of the versions it replaced. The
// event of such a document was refused by the log, which stopped the whole
// node rag add run ("run node rag add again"), and the run again stopped at the
// same document, so the files after it were never ingested.
func TestADocumentOverTheEventBoundIsSplitAcrossEvents(t *testing.T) {
	ctx := testCtx(t)
	const bound = 32 << 10
	f := newFixture(t, boundedEvents(bound))
	b := f.base(t, "docs")
	dir := t.TempDir()
	big := filepath.Join(dir, "big.md")
	writeDocs(t, map[string]string{filepath.Join(dir, "a.md"): "# A\n\nThe first file.\n", big: bigGuide(600),
		filepath.Join(dir, "c.md"): "# C\n\nThe file after the large one.\n"})

	res, err := knowledge.AddFolder(ctx, b, []string{dir}, knowledge.FolderOptions{Workers: 1})
	if err != nil || len(res.Failed) != 0 || res.Added != 3 {
		t.Fatalf("AddFolder = %+v, %v; want the three files added", res, err)
	}
	var chunks int
	for _, r := range res.Results {
		if r.Source == big {
			chunks = r.Chunks
		}
	}
	parts := ingestedParts(t, f, "docs", big)
	if len(parts) < 3 {
		t.Fatalf("%s is in %d events; want it split in several of at most %d bytes", big, len(parts), bound)
	}
	n := 0
	for i, p := range parts {
		if p.Part != i+1 || p.Parts != len(parts) || p.Hash != parts[0].Hash {
			t.Errorf("event %d of %s is part %d of %d (hash %.8s); want part %d of %d of one version", i+1, big, p.Part, p.Parts, p.Hash, i+1, len(parts))
		}
		n += len(p.Chunks)
	}
	if n != chunks {
		t.Errorf("the parts hold %d chunks; the result says %d", n, chunks)
	}
	whole := func(b *knowledge.Base, want, paragraphs int) {
		t.Helper()
		hits, ok := b.Chunks(big)
		last := fmt.Sprintf("item %d.", paragraphs-1)
		if !ok || len(hits) != want || !strings.Contains(hits[len(hits)-1].Content, last) || !strings.Contains(hits[0].Content, "item 0.") {
			t.Fatalf("%s has %d chunks (found %v); want its %d, from the first paragraph to the last", big, len(hits), ok, want)
		}
		for i, h := range hits[1:] {
			if h.Start < hits[i].Start {
				t.Fatalf("chunk %d of %s starts at %d, before the one before it (%d)", i+2, big, h.Start, hits[i].Start)
			}
		}
	}
	whole(b, chunks, 600)
	if got, err := b.Search(ctx, knowledge.Query{Text: "item 599", Mode: knowledge.ModeBM25, Limit: 1}); err != nil || len(got.Hits) != 1 || got.Hits[0].Source != big {
		t.Errorf("search for the last paragraph = %+v, %v; want a chunk of %s", got, err, big)
	}

	// The same bytes again: unchanged, nothing written.
	res, err = knowledge.AddFolder(ctx, b, []string{dir}, knowledge.FolderOptions{})
	if err != nil || res.Unchanged != 3 {
		t.Fatalf("AddFolder again = %+v, %v; want the three unchanged", res, err)
	}

	// A new version, then enough writes of another document to compact the
	// stream: the parts of the version replaced go, those of the live one stay.
	writeDocs(t, map[string]string{big: bigGuide(640)})
	r, err := b.Add(ctx, big, []byte(bigGuide(640)), "v2")
	if err != nil || r.Status != knowledge.StatusReplaced {
		t.Fatalf("Add of the new version = %+v, %v", r, err)
	}
	chunks = r.Chunks
	if again, err := b.Add(ctx, big, []byte(bigGuide(640)), "v2"); err != nil || again != r {
		t.Fatalf("Add again under its key = %+v, %v; want its result %+v (from the parts' events)", again, err, r)
	}
	for i := range knowledge.CompactMin + knowledge.CompactTail {
		addText(t, b, "notes.md", fmt.Sprintf("# Notes\n\nVersion %d.\n", i))
	}
	if n, err := b.Compact(ctx); err != nil || n == 0 {
		t.Fatalf("Compact = %d, %v; want the superseded events deleted", n, err)
	}
	if parts := ingestedParts(t, f, "docs", big); len(parts) < 3 || parts[0].Part != 1 || len(parts) != parts[0].Parts {
		t.Fatalf("after the compaction %s has %d events; want the parts of its live version, all of them", big, len(parts))
	}
	whole(b, chunks, 640)

	// A restart folds the parts into the one document.
	bs, err := knowledge.Open(knowledge.Config{Log: boundedLog{Log: f.log, max: bound}, Vectors: f.store, Embedder: f.emb, EmbedderName: "hashing",
		MaxEventBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	b2, err := bs.Base(ctx, "docs")
	if err != nil {
		t.Fatal(err)
	}
	whole(b2, chunks, 640)
	if st := b2.Stats(); st.Documents != 4 {
		t.Errorf("after a restart %d documents; want 4", st.Documents)
	}
	calls := f.emb.calls.Load()
	if r, err := b2.Add(ctx, big, []byte(bigGuide(640)), ""); err != nil || r.Status != knowledge.StatusUnchanged || r.Chunks != chunks {
		t.Errorf("Add of the stored version after a restart = %+v, %v; want unchanged, %d chunks", r, err, chunks)
	}
	if f.emb.calls.Load() != calls {
		t.Error("an unchanged document was embedded")
	}
}

// A document with a chunk that alone is over the event bound cannot be split:
// it is refused with ErrTooLarge naming it and the bound, and node rag add
// ingests the other files and reports it failed (exit status 3), where the
// log's refusal stopped the whole run.
func TestAChunkOverTheEventBoundFailsItsDocumentOnly(t *testing.T) {
	ctx := testCtx(t)
	const bound = 8 << 10
	f := newFixture(t, boundedEvents(bound), func(c *knowledge.Config) { c.Chunk.MaxTokens = 4096 })
	b := f.base(t, "docs")
	dir := t.TempDir()
	huge := filepath.Join(dir, "b.md")
	writeDocs(t, map[string]string{filepath.Join(dir, "a.md"): "# A\n\nThe first file.\n",
		huge: "# B\n\n" + strings.Repeat("<&> ", 600) + "\n", filepath.Join(dir, "c.md"): "# C\n\nThe file after it.\n"})

	res, err := knowledge.AddFolder(ctx, b, []string{dir}, knowledge.FolderOptions{Workers: 1})
	if err != nil || res.Added != 2 || len(res.Failed) != 1 {
		t.Fatalf("AddFolder = %+v, %v; want a.md and c.md added, b.md failed", res, err)
	}
	fe := res.Failed[0]
	if fe.Source != huge || !errors.Is(fe, knowledge.ErrTooLarge) || !strings.Contains(fe.Message, huge) || !strings.Contains(fe.Message, fmt.Sprintf("over the bound of %d bytes", bound)) {
		t.Errorf("failed %+v; want %s refused as too large, naming it and the bound", fe, huge)
	}
	if _, ok := b.Chunks(huge); ok {
		t.Errorf("%s is stored", huge)
	}
}

// writeDocs writes files (path → content).
func writeDocs(t *testing.T, files map[string]string) {
	t.Helper()
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// A part of a split ingestion read without the parts before it — a fold that
// meets a compaction half done, which deleted them first — is not folded: the
// document is not made of its chunks alone, and the later event of the source,
// which compaction keeps, gives the document its chunks.
func TestAPartWithoutItsFirstIsNotFolded(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	ingested := func(part, parts int, hash, text string) *messages.KBDocumentIngested {
		return &messages.KBDocumentIngested{Reason: "new document", Source: "x.md", Hash: hash, Bytes: 10, MarkdownBytes: 10,
			Embedder: "hashing", Format: "markdown", Conversion: 1, Part: part, Parts: parts,
			Chunks: []messages.KBChunk{{ChunkID: "c_" + hash + text[:1], Index: part, End: len(text), Text: text, Tokens: 3}}}
	}
	appendStored(t, f, "docs", 1, &messages.KBDocumentIngested{Reason: "new document", Source: "y.md", Hash: "y", Embedder: "hashing",
		Format: "markdown", Conversion: 1, Chunks: []messages.KBChunk{{ChunkID: "c_y", Text: "why not", Tokens: 2}}})
	appendStored(t, f, "docs", 2, ingested(2, 2, "h1", "stray second half"))
	b := f.base(t, "docs")
	if hits, ok := b.Chunks("x.md"); ok {
		t.Fatalf("a part without its first made x.md of %+v", hits)
	}
	appendStored(t, f, "docs", 3, ingested(0, 0, "h2", "the whole version"))
	if _, err := b.Search(ctx, knowledge.Query{Text: "whole", Mode: knowledge.ModeBM25}); err != nil {
		t.Fatal(err)
	}
	if hits, ok := b.Chunks("x.md"); !ok || len(hits) != 1 || hits[0].Content != "the whole version" {
		t.Fatalf("x.md after its whole version = %+v (found %v); want its one chunk", hits, ok)
	}
}

// appendStored appends p to knowledge base name's stream at seq, as an earlier
// version of the code wrote it.
func appendStored(t *testing.T, f *fixture, name string, seq uint64, p messages.Payload) {
	t.Helper()
	env, err := messages.NewEnvelope(p)
	if err != nil {
		t.Fatal(err)
	}
	env.ID, env.SessionID, env.Seq, env.TS, env.Actor = fmt.Sprintf("kb-old-%d", seq), knowledge.Stream(name), seq, t0.UnixMicro(), "knowledge"
	if err := f.log.Append(testCtx(t), []messages.Envelope{env}); err != nil {
		t.Fatal(err)
	}
}

// The events of a split document are of kb.document_ingested version 2, those
// of a whole one of version 1: a node of a build from before the parts refuses
// the parts (messages.ErrFutureVersion) instead of reading each as the whole
// document, keeping the last one's chunks and deleting the others' vectors and
// events, and still reads every document that is not split.
func TestASplitDocumentIsWrittenInVersion2(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t, boundedEvents(32<<10))
	b := f.base(t, "docs")
	if _, err := b.Add(ctx, "big.md", []byte(bigGuide(600)), ""); err != nil {
		t.Fatal(err)
	}
	addText(t, b, "small.md", "# Small\n\nOne chunk.\n")
	split := 0
	for _, e := range events(t, f.log, "docs") {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		in := p.(*messages.KBDocumentIngested)
		want := 1
		if in.Source == "big.md" {
			want, split = 2, split+1
		}
		if e.Version != want {
			t.Errorf("seq %d (%s, part %d of %d) is of version %d; want %d", e.Seq, in.Source, in.Part, in.Parts, e.Version, want)
		}
	}
	if split < 2 {
		t.Fatalf("big.md is in %d events; want it split", split)
	}
}

// A version split across events of which the fold found only some — the first
// part without the next — holds only some of its chunks: the same bytes added
// again are ingested again, whole, instead of being taken as unchanged for good.
func TestADocumentStoredInSomeOfItsPartsIsIngestedAgain(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t, boundedEvents(32<<10))
	body := []byte(bigGuide(600))
	full, err := f.base(t, "full").Add(ctx, "big.md", body, "")
	if err != nil {
		t.Fatal(err)
	}
	es := events(t, f.log, "full")
	first, err := es[0].Decode()
	if err != nil {
		t.Fatal(err)
	}
	if p := first.(*messages.KBDocumentIngested); p.Part != 1 || p.Parts < 2 || len(es) != p.Parts {
		t.Fatalf("the first event of big.md is part %d of %d, in %d events; want it split", p.Part, p.Parts, len(es))
	}
	appendStored(t, f, "docs", 1, first)
	b := f.base(t, "docs")
	if hits, _ := b.Chunks("big.md"); len(hits) >= full.Chunks {
		t.Fatalf("part 1 alone gives %d chunks of %d", len(hits), full.Chunks)
	}

	r, err := b.Add(ctx, "big.md", body, "")
	if err != nil || r.Status != knowledge.StatusReplaced || r.Chunks != full.Chunks {
		t.Fatalf("Add of the same bytes = %+v, %v; want it ingested again (replaced), %d chunks", r, err, full.Chunks)
	}
	if hits, _ := b.Chunks("big.md"); len(hits) != full.Chunks {
		t.Fatalf("big.md has %d chunks after it; want %d", len(hits), full.Chunks)
	}
	es = events(t, f.log, "docs")
	if p, err := es[1].Decode(); err != nil || !strings.Contains(p.(*messages.KBDocumentIngested).Reason, "stored in 1 of its") {
		t.Errorf("the reason of the ingestion again = %+v, %v; want it to say the parts stored", p, err)
	}
	if r, err := b.Add(ctx, "big.md", body, ""); err != nil || r.Status != knowledge.StatusUnchanged || r.Chunks != full.Chunks {
		t.Errorf("Add once more = %+v, %v; want unchanged, %d chunks", r, err, full.Chunks)
	}
}

// The parts of a split ingestion are appended together, at consecutive seqs: a
// part that does not follow the one before it is of another write (one whose
// earlier parts the log lost), and is not folded into the version before it.
func TestAPartNotAtTheNextSeqIsNotFolded(t *testing.T) {
	f := newFixture(t)
	part := func(n int, text string) *messages.KBDocumentIngested {
		return &messages.KBDocumentIngested{Reason: "new document", Source: "x.md", Hash: "h", Bytes: 10, MarkdownBytes: 10,
			Embedder: "hashing", Format: "markdown", Conversion: 1, Part: n, Parts: 2,
			Chunks: []messages.KBChunk{{ChunkID: fmt.Sprintf("c_h%d", n), Index: n - 1, End: len(text), Text: text, Tokens: 3}}}
	}
	appendStored(t, f, "docs", 1, part(1, "first half"))
	appendStored(t, f, "docs", 2, &messages.KBDocumentIngested{Reason: "new document", Source: "y.md", Hash: "y", Embedder: "hashing",
		Format: "markdown", Conversion: 1, Chunks: []messages.KBChunk{{ChunkID: "c_y", Text: "why not", Tokens: 2}}})
	appendStored(t, f, "docs", 3, part(2, "second half"))
	if hits, ok := f.base(t, "docs").Chunks("x.md"); !ok || len(hits) != 1 || hits[0].Content != "first half" {
		t.Fatalf("x.md = %+v (found %v); want its first part's chunk alone", hits, ok)
	}
}

// A key whose document was stored in some of its parts only (the append was
// cut) is not done: the same document sent again under it is written whole and
// answered with the request's result (added), and another document under it is
// refused (ErrKeyReused), writing nothing. Before, the key answered its first
// part's result and the document stayed without its other chunks.
func TestAKeyedDocumentStoredInSomeOfItsPartsIsWrittenWholeUnderItsKey(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t, boundedEvents(32<<10))
	body := []byte(bigGuide(600))
	full, err := f.base(t, "full").Add(ctx, "big.md", body, "")
	if err != nil {
		t.Fatal(err)
	}
	first, err := events(t, f.log, "full")[0].Decode()
	if err != nil {
		t.Fatal(err)
	}
	part := first.(*messages.KBDocumentIngested)
	part.Key = "k1"
	appendStored(t, f, "docs", 1, part)
	b := f.base(t, "docs")
	if _, err := b.Add(ctx, "big.md", []byte(bigGuide(601)), "k1"); !errors.Is(err, knowledge.ErrKeyReused) {
		t.Fatalf("another document under the key: %v; want ErrKeyReused", err)
	}
	if n := len(events(t, f.log, "docs")); n != 1 {
		t.Fatalf("the refused document wrote %d events", n-1)
	}
	r, err := b.Add(ctx, "big.md", body, "k1")
	if err != nil || r.Status != knowledge.StatusAdded || r.Chunks != full.Chunks {
		t.Fatalf("the key sent again = %+v, %v; want added, %d chunks", r, err, full.Chunks)
	}
	if hits, _ := b.Chunks("big.md"); len(hits) != full.Chunks {
		t.Fatalf("big.md has %d chunks; want %d", len(hits), full.Chunks)
	}
	n := len(events(t, f.log, "docs"))
	if again, err := b.Add(ctx, "big.md", body, "k1"); err != nil || again != r {
		t.Fatalf("the key once more = %+v, %v; want %+v", again, err, r)
	}
	if len(events(t, f.log, "docs")) != n {
		t.Fatal("the key once more wrote events")
	}
}

// A key whose document was stored in some of its parts only names that
// ingestion still: a removal sent under it is another request, refused with
// ErrKeyReused, writing nothing, as under a key whose document was stored
// whole. Before, the removal found the key not done (keyDone) and was
// written, the document dropped and the key recorded as the removal's.
func TestARemovalUnderTheKeyOfADocumentStoredInSomeOfItsPartsIsRefused(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t, boundedEvents(32<<10))
	first, err := f.base(t, "full").Add(ctx, "big.md", []byte(bigGuide(600)), "")
	if err != nil {
		t.Fatal(err)
	}
	ev, err := events(t, f.log, "full")[0].Decode()
	if err != nil {
		t.Fatal(err)
	}
	part := ev.(*messages.KBDocumentIngested)
	part.Key = "k1"
	appendStored(t, f, "docs", 1, part)
	b := f.base(t, "docs")
	if err := b.Remove(ctx, "big.md", "k1"); !errors.Is(err, knowledge.ErrKeyReused) {
		t.Fatalf("a removal under the ingestion's key: %v; want ErrKeyReused", err)
	}
	if n := len(events(t, f.log, "docs")); n != 1 {
		t.Fatalf("the refused removal wrote %d events", n-1)
	}
	// The key's own request still completes the document.
	r, err := b.Add(ctx, "big.md", []byte(bigGuide(600)), "k1")
	if err != nil || r.Chunks != first.Chunks {
		t.Fatalf("the key's request = %+v, %v; want %d chunks", r, err, first.Chunks)
	}
}
