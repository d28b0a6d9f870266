package rag

import "github.com/troupe-run/troupe/pipelines/bpe"

// Cl100k counts tokens as OpenAI's cl100k_base encoding does (the encoding of
// text-embedding-3 and text-embedding-ada-002), for the counts a session makes on
// every model call: a bpe.Counter of cl100k_base, which splits a text with a
// scanner instead of a backtracking regular expression and merges each piece's
// byte pairs on the stack, or with a heap for a long piece, so a count allocates
// nothing once the ranks are loaded and takes O(n log n) whatever the text.
// Its counts are tiktoken-go's (bpetest holds it to them); a text that is not
// valid UTF-8 is counted with each invalid byte read as U+FFFD, as tiktoken-go
// reads it and as a request carries it (see bpe.Counter). If the ranks cannot
// be loaded, a count is the text's length in bytes.
//
// The zero value is ready to use and safe for concurrent use; the ranks (compiled
// into the binary by tiktoken-go-loader) are loaded on the first Count.
type Cl100k struct {
	c bpe.Counter
}

var _ Tokenizer = (*Cl100k)(nil)

// Count implements Tokenizer.
func (c *Cl100k) Count(text string) int {
	return c.c.Count(text)
}
