package rag

import (
	"fmt"
	"strings"
	"testing"
)

// The default overlap (64 tokens) is no smaller than a small chunk budget
// (chunk_tokens may be 32 to 8192), where a configured overlap must be under the
// budget: each chunk was then mostly the chunk before, and a document of short
// paragraphs cut at 64 tokens made 36 chunks instead of 8, embedding four times
// its tokens. The default must leave most of a chunk to new text.
func TestDefaultOverlapFitsASmallChunk(t *testing.T) {
	var sb strings.Builder
	for i := range 40 {
		fmt.Fprintf(&sb, "Paragraph %d says a few words about thing %d.\n\n", i, i)
	}
	paras := Split(sb.String())
	text := 0
	for _, p := range paras {
		text += defaultTokenizer.Count(p.Text)
	}
	for _, max := range []int{32, 48, 64, 128, 512} {
		embedded := 0
		for _, c := range Pack(paras, ChunkOptions{MaxTokens: max}) {
			embedded += c.Tokens
		}
		if embedded > 2*text {
			t.Errorf("chunks of %d tokens: %d tokens embedded for a text of %d", max, embedded, text)
		}
	}
}
