package rag

import "github.com/troupe-run/troupe/pipelines/bpe"

// Tokenizer counts the tokens of a text as the embedding model will. Count must be
// deterministic and safe for concurrent use.
type Tokenizer interface {
	Count(text string) int
}

// TiktokenCounter counts tokens with OpenAI's cl100k_base encoding, as Cl100k
// does (both are a bpe.Counter of cl100k_base, whose counts are tiktoken's), and
// says through Err whether the encoding could be loaded. The ranks are compiled
// into the binary by tiktoken-go-loader, so counting needs no network. The zero
// value is ready to use: the encoding is loaded on the first Count (it takes a
// few hundred milliseconds), once, and a TiktokenCounter is then safe for
// concurrent use.
//
// Special tokens such as "<|endoftext|>" in the text are counted as ordinary text.
// If the encoding cannot be loaded, Count returns the text's length in bytes, and
// Err says why.
type TiktokenCounter struct {
	c bpe.Counter
}

var _ Tokenizer = (*TiktokenCounter)(nil)

// Count implements Tokenizer.
func (c *TiktokenCounter) Count(text string) int {
	return c.c.Count(text)
}

// Err reports why the encoding could not be loaded, or nil. It loads the encoding
// if no Count has yet.
func (c *TiktokenCounter) Err() error {
	return c.c.Err()
}
