package knowledge_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/pipelines/rag"
)

// A text document (AddText: the HTTP API's JSON, the rag tool's add) holding a NUL
// byte is refused and writes nothing, as the same text uploaded as a file is
// (rag.Convert): stored, "Os\x00lo" was indexed as letters around a NUL that no
// query for Oslo finds.
func TestTextWithANULIsRefusedAsAFileIs(t *testing.T) {
	f := newFixture(t)
	b := f.base(t, "docs")
	ctx := testCtx(t)
	if _, err := b.Add(ctx, "city.md", []byte("# City\n\nAlice lives in Os\x00lo."), ""); !errors.Is(err, rag.ErrUnsupported) {
		t.Fatalf("file with a NUL: %v; want rag.ErrUnsupported", err)
	}
	_, err := b.AddText(ctx, "city.md", "# City\n\nAlice lives in Os\x00lo.", "")
	if !errors.Is(err, rag.ErrUnsupported) {
		t.Errorf("text with a NUL: %v; want rag.ErrUnsupported", err)
	}
	if n := len(events(t, f.log, "docs")); n != 0 {
		t.Errorf("%d events after only bad input", n)
	}
}

// A refused text's error names the package once: "knowledge: knowledge: …" was
// what the HTTP API answered for a text with a NUL byte or not UTF-8.
func TestARefusedTextSaysKnowledgeOnce(t *testing.T) {
	b := newFixture(t).base(t, "docs")
	for _, text := range []string{"Os\x00lo", "caf\xe9"} {
		_, err := b.AddText(testCtx(t), "city.md", text, "")
		if err == nil || strings.Count(err.Error(), "knowledge:") != 1 {
			t.Errorf("%q: %v; want one \"knowledge:\"", text, err)
		}
	}
}
