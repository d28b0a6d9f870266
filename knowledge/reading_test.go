package knowledge_test

import (
	"context"
	"errors"
	"testing"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
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

// A document stored before its format was recorded (an event without one) is
// taken as read the way it is now: its bytes sent again are unchanged, nothing is
// embedded, so an upgrade does not convert and embed every base anew.
func TestDocumentStoredWithoutAFormatIsUnchanged(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	b := f.base(t, "docs")
	body := []byte("# Notes\n\nKeep the backups for a week.\n")
	vs, _ := llm.HashingEmbedder{}.Embed(ctx, []string{"Keep the backups for a week."})
	env, err := messages.NewEnvelope(&messages.KBDocumentIngested{Reason: "new document", Source: "notes.md", Hash: rag.DocumentHash(body),
		Bytes: len(body), MarkdownBytes: len(body), Embedder: "hashing", Chunks: []messages.KBChunk{{ChunkID: "c_old", Tokens: 7,
			HeadingPath: []string{"# Notes"}, End: len(body), Text: "Keep the backups for a week.", Vector: messages.Vector(vs[0])}}})
	if err != nil {
		t.Fatal(err)
	}
	env.ID, env.SessionID, env.Seq, env.TS, env.Actor = "kb-old", knowledge.Stream("docs"), 1, t0.UnixMicro(), "knowledge"
	if err := f.log.Append(ctx, []messages.Envelope{env}); err != nil {
		t.Fatal(err)
	}
	if r, err := b.Add(ctx, "notes.md", body, ""); err != nil || r.Status != knowledge.StatusUnchanged {
		t.Fatalf("Add of the bytes of a document stored without a format = %+v, %v; want unchanged", r, err)
	}
	if r, err := b.AddText(ctx, "notes.md", string(body), ""); err != nil || r.Status != knowledge.StatusUnchanged {
		t.Fatalf("AddText of them = %+v, %v; want unchanged", r, err)
	}
	if n := f.emb.calls.Load(); n != 0 {
		t.Errorf("%d embedder calls for documents stored already", n)
	}
	if docs := b.Documents(); len(docs) != 1 || docs[0].Format != "" {
		t.Errorf("documents %+v; want notes.md without a format", docs)
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
