package rag

import (
	"fmt"
	"strings"
	"testing"
)

// A fenced code block longer than a chunk is cut between lines; each chunk of
// it must still be a fenced block: opened by the block's fence (its language
// with it) and closed. Cut as it was, the first chunk opened a fence it never
// closed and the last closed one it never opened, so that, laid out one after
// another (a search's passages, a context's evidence), every passage after the
// first chunk read as code and the code of the others as prose.
func TestPackKeepsEveryChunkOfACodeBlockFenced(t *testing.T) {
	var lines []string
	for i := range 120 {
		lines = append(lines, fmt.Sprintf("\tx%d := f(%d) // step", i, i))
	}
	md := "# Code\n\nBefore the code.\n\n```go\n" + strings.Join(lines, "\n") + "\n```\n\nAfter the code.\n"
	for _, opts := range []ChunkOptions{{MaxTokens: 64, OverlapTokens: -1}, {MaxTokens: 100, OverlapTokens: 30}, {MaxTokens: 200}} {
		cs := Pack(Split(md), opts)
		seen := map[string]bool{}
		code := 0
		for i, c := range cs {
			if c.Tokens > opts.MaxTokens || defaultTokenizer.Count(c.Text) != c.Tokens {
				t.Errorf("%+v: chunk %d: %d tokens (counted %d), over %d", opts, i, c.Tokens, defaultTokenizer.Count(c.Text), opts.MaxTokens)
			}
			if !strings.Contains(c.Text, "\tx") {
				continue
			}
			code++
			open := strings.Count(c.Text, "```go\n")
			if open != 1 || strings.Count(c.Text, "```")%2 != 0 || !strings.Contains(c.Text, "\n```") {
				t.Errorf("%+v: chunk %d is no whole fenced block: %q", opts, i, c.Text)
			}
			for _, l := range strings.Split(c.Text, "\n") {
				if strings.HasPrefix(l, "\tx") {
					seen[l] = true
				}
			}
		}
		if code < 2 || len(seen) != len(lines) {
			t.Errorf("%+v: %d chunks of code, %d lines of %d", opts, code, len(seen), len(lines))
		}
	}
}
