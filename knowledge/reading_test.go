package knowledge_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/pipelines/rag"
)

// The same bytes read another way are another document: a file sent as guide.txt
// and again as guide.md under one source name, or a page sent as {source,
// content} Markdown and again as the HTML file, is converted anew and replaces
// its chunks. It was "unchanged" by its hash alone, so the chunks of the first
// reading (headings escaped as text, HTML tags as words) stayed for good, and an
// upgrade that reads a file better never reached the documents stored before it.
// The same bytes read the same way are still unchanged, without an embedding.
func TestSameBytesReadAnotherWayReplaceTheChunks(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	b := f.base(t, "docs")
	guide := []byte("# Install\n\nRun the installer.\n\n## Linux\n\nUse the tarball.\n")
	if r, err := b.AddFile(ctx, "docs/guide", "guide.txt", guide, ""); err != nil || r.Status != knowledge.StatusAdded {
		t.Fatalf("AddFile(guide.txt) = %+v, %v", r, err)
	}
	if hits, _ := b.Chunks("docs/guide"); len(hits) != 1 || hits[0].HeadingPath != "" {
		t.Fatalf("as text: %+v; want one chunk under no heading", hits)
	}
	r, err := b.AddFile(ctx, "docs/guide", "guide.md", guide, "")
	if err != nil || r.Status != knowledge.StatusReplaced {
		t.Fatalf("AddFile(guide.md) of the same bytes = %+v, %v; want replaced", r, err)
	}
	hits, _ := b.Chunks("docs/guide")
	if len(hits) != 2 || hits[1].HeadingPath != "# Install > ## Linux" {
		t.Fatalf("as Markdown: %+v; want two chunks, the second under # Install > ## Linux", hits)
	}
	if docs := b.Documents(); len(docs) != 1 || docs[0].Format != "markdown" {
		t.Errorf("documents %+v; want docs/guide read as markdown", docs)
	}
	calls := f.emb.calls.Load()
	if r, err := b.AddFile(ctx, "docs/guide", "guide.markdown", guide, ""); err != nil || r.Status != knowledge.StatusUnchanged {
		t.Fatalf("AddFile(guide.markdown) of the same bytes = %+v, %v; want unchanged (read as Markdown again)", r, err)
	}
	if f.emb.calls.Load() != calls {
		t.Error("an unchanged document was embedded")
	}

	page := "<h1>Page</h1><p>The <b>quick</b> fox.</p>"
	if r, err := b.AddText(ctx, "page.html", page, ""); err != nil || r.Status != knowledge.StatusAdded {
		t.Fatalf("AddText(page.html) = %+v, %v", r, err)
	}
	if r, err := b.Add(ctx, "page.html", []byte(page), ""); err != nil || r.Status != knowledge.StatusReplaced {
		t.Fatalf("Add(page.html) of the text's bytes = %+v, %v; want replaced (converted from HTML)", r, err)
	}
	if hits, _ := b.Chunks("page.html"); len(hits) != 1 || hits[0].HeadingPath != "# Page" || hits[0].Content != "The **quick** fox." {
		t.Fatalf("as HTML: %+v; want the chunk \"The **quick** fox.\" under # Page", hits)
	}
	if r, err := b.AddText(ctx, "page.html", page, ""); err != nil || r.Status != knowledge.StatusReplaced {
		t.Fatalf("AddText(page.html) again = %+v, %v; want replaced (the text as sent)", r, err)
	}
	if r, err := b.AddText(ctx, "page.html", page, ""); err != nil || r.Status != knowledge.StatusUnchanged {
		t.Fatalf("AddText(page.html) a third time = %+v, %v; want unchanged", r, err)
	}
}

// A document stored before its format was recorded (an event without one) was
// read by the code before the current conversion (rag.ConversionVersion 1: the
// table and heading fixes): node rag add of its file, its bytes unchanged, reads
// it again and replaces its chunks, once; the next run finds it unchanged and
// embeds nothing. It was taken as read the way it is now and skipped for good,
// so an upgrade never reached the chunks stored before it (here a table's rows
// of empty cells, which version 1 leaves out). A document whose event recorded
// its format but not the conversion's version was read by version 1 (both came
// in one change): it stays unchanged.
func TestDocumentStoredBeforeTheCurrentConversionIsReadAgainOnce(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	b := f.base(t, "docs")
	dir := t.TempDir()
	sheet, current := filepath.Join(dir, "stock.csv"), filepath.Join(dir, "notes.md")
	sheetBody := []byte("item,qty\nbolts,4\n,,\n,,\n")
	notesBody := []byte("# Notes\n\nKeep the backups for a week.\n")
	for path, body := range map[string][]byte{sheet: sheetBody, current: notesBody} {
		if err := os.WriteFile(path, body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stale := "| item | qty |\n|---|---|\n| bolts | 4 |\n|  |  |\n|  |  |"
	appendStored(t, f, "docs", 1, &messages.KBDocumentIngested{Reason: "new document", Source: sheet, Hash: rag.DocumentHash(sheetBody),
		Bytes: len(sheetBody), MarkdownBytes: len(stale), Embedder: "hashing", Chunks: []messages.KBChunk{{ChunkID: "c_old", Tokens: 20,
			End: len(stale), Text: stale}}})
	appendStored(t, f, "docs", 2, &messages.KBDocumentIngested{Reason: "new document", Source: current, Hash: rag.DocumentHash(notesBody),
		Bytes: len(notesBody), MarkdownBytes: len(notesBody), Embedder: "hashing", Format: "markdown", Chunks: []messages.KBChunk{{ChunkID: "c_notes",
			Tokens: 7, HeadingPath: []string{"# Notes"}, End: len(notesBody), Text: "Keep the backups for a week."}}})

	res, err := knowledge.AddFolder(ctx, b, []string{dir}, knowledge.FolderOptions{})
	if err != nil || len(res.Failed) != 0 || res.Replaced != 1 || res.Unchanged != 1 {
		t.Fatalf("the first run after the upgrade = %+v, %v; want %s replaced (read again), %s unchanged", res, err, sheet, current)
	}
	hits, _ := b.Chunks(sheet)
	if len(hits) != 1 || strings.Contains(hits[0].Content, "|  |") || !strings.Contains(hits[0].Content, "bolts") {
		t.Fatalf("chunks of %s after the run: %+v; want the table read by the current conversion, without its empty rows", sheet, hits)
	}
	for _, d := range b.Documents() {
		if d.Source == sheet && d.Format != "csv" {
			t.Errorf("%s is recorded as read as %q; want csv", sheet, d.Format)
		}
	}
	es := events(t, f.log, "docs")
	if p, err := es[len(es)-1].Decode(); err != nil {
		t.Error(err)
	} else if in := p.(*messages.KBDocumentIngested); in.Conversion != rag.ConversionVersion || !strings.HasPrefix(in.Reason, "read again by the current conversion") {
		t.Errorf("the event of the reading again records conversion %d, reason %q; want conversion %d, and the reason that it is read again",
			in.Conversion, in.Reason, rag.ConversionVersion)
	}
	calls := f.emb.calls.Load()
	res, err = knowledge.AddFolder(ctx, b, []string{dir}, knowledge.FolderOptions{})
	if err != nil || res.Unchanged != 2 || res.Replaced+res.Added != 0 {
		t.Fatalf("the second run = %+v, %v; want both unchanged", res, err)
	}
	if n := f.emb.calls.Load(); n != calls {
		t.Errorf("%d embedder calls in a run of unchanged documents", n-calls)
	}
	if n := len(events(t, f.log, "docs")); n != 3 {
		t.Errorf("%d events; want 3 (the two stored, the reading again)", n)
	}
}

// A key applied to one reading of a document is not the key of another: the
// bytes of guide.txt sent again as guide.md under the key of the first are
// another version of the document, refused with ErrKeyReused as other bytes
// would be, not answered with the first's result while its chunks stay those of
// the text. The same request again is still answered as it was.
func TestKeyOfOneReadingIsNotAnothers(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	b := f.base(t, "docs")
	guide := []byte("# Install\n\nRun the installer.\n\n## Linux\n\nUse the tarball.\n")
	if r, err := b.AddFile(ctx, "docs/guide", "guide.txt", guide, "k1"); err != nil || r.Status != knowledge.StatusAdded {
		t.Fatalf("AddFile(guide.txt) = %+v, %v", r, err)
	}
	if r, err := b.AddFile(ctx, "docs/guide", "guide.txt", guide, "k1"); err != nil || r.Status != knowledge.StatusAdded {
		t.Fatalf("AddFile(guide.txt) again under its key = %+v, %v; want its result", r, err)
	}
	if r, err := b.AddFile(ctx, "docs/guide", "guide.md", guide, "k1"); !errors.Is(err, knowledge.ErrKeyReused) {
		t.Fatalf("AddFile(guide.md) under the key of guide.txt = %+v, %v; want ErrKeyReused", r, err)
	}
	if docs := b.Documents(); len(docs) != 1 || docs[0].Format != "text" {
		t.Errorf("documents %+v; want docs/guide read as text", docs)
	}
}
