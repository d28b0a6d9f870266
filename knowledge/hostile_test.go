package knowledge_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/pipelines/rag"
)

// runeTokenizer counts characters as tokens and counts its calls.
type runeTokenizer struct{ calls int }

func (r *runeTokenizer) Count(text string) int {
	r.calls++
	return utf8.RuneCountInString(text)
}

// A document far over MaxChunks is refused after packing just past the limit:
// without the stop, all 200,000 paragraphs are counted before the refusal.
func TestAddStopsPackingPastMaxChunks(t *testing.T) {
	tk := &runeTokenizer{}
	f := newFixture(t, func(c *knowledge.Config) {
		c.MaxChunks, c.Chunk = 3, rag.ChunkOptions{MaxTokens: 40, OverlapTokens: -1, Tokenizer: tk}
	})
	md := strings.Repeat("Some words here.\n\n", 200_000)
	_, err := f.base(t, "docs").AddText(context.Background(), "big.md", md, "")
	if !errors.Is(err, knowledge.ErrTooLarge) || !strings.Contains(err.Error(), "more than 3 chunks") {
		t.Fatalf("AddText(200,000 paragraphs) = %v, want ErrTooLarge", err)
	}
	if tk.calls > 100 {
		t.Errorf("%d token counts for a document refused after 4 chunks", tk.calls)
	}
}

// A document that passes a bound of its conversion (rag.ErrTooLarge: HTML nested
// too deep) is ErrTooLarge, as one over MaxDocumentBytes or MaxChunks is, so that
// callers answer it as the request's fault (HTTP 413, the rag tool's argument
// error) rather than as a failure to try again.
func TestAddOverAConversionBoundIsErrTooLarge(t *testing.T) {
	f := newFixture(t)
	deep := strings.Repeat("<div>", 600) + "deep" + strings.Repeat("</div>", 600)
	_, err := f.base(t, "docs").Add(context.Background(), "deep.html", []byte(deep), "")
	if !errors.Is(err, knowledge.ErrTooLarge) || !errors.Is(err, rag.ErrTooLarge) || !strings.Contains(err.Error(), "nested too deep") {
		t.Fatalf("Add(HTML nested 600 deep) = %v, want ErrTooLarge and rag.ErrTooLarge saying it is nested too deep", err)
	}
}
