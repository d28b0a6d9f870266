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
