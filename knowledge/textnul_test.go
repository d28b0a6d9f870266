package knowledge_test

import (
	"errors"
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
