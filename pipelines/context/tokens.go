package context

import (
	"github.com/troupe-run/troupe/pipelines/bpe"
	"github.com/troupe-run/troupe/pipelines/rag"
)

// Cl100k is the allocation-free cl100k_base counter the builder's callers count
// with: rag.Cl100k's counts (a bpe.Counter of cl100k_base), and a bounded count
// (CountWithin) with which the builder finds where to cut a long text without
// counting all of it at every try.
//
// The zero value is ready to use and safe for concurrent use.
type Cl100k struct {
	c bpe.Counter
}

var (
	_ rag.Tokenizer  = (*Cl100k)(nil)
	_ boundedCounter = (*Cl100k)(nil)
)

// Count implements rag.Tokenizer.
func (c *Cl100k) Count(text string) int { return c.c.Count(text) }

// CountWithin is bpe.Counter.CountWithin: whether text counts at most limit
// tokens, exactly, having counted little more than limit tokens of it.
func (c *Cl100k) CountWithin(text string, limit int) (int, bool) {
	return c.c.CountWithin(text, limit)
}

// boundedCounter is a Tokenizer that can tell whether a text counts at most a
// limit without counting all of it (Cl100k). The builder's searches for a cut use
// it when its Tokenizer has it; the answers are Count's, so the cuts are the same.
type boundedCounter interface {
	CountWithin(text string, limit int) (int, bool)
}

// within reports whether text counts at most limit tokens.
func (b Builder) within(text string, limit int) bool {
	if bc, ok := b.Tokenizer.(boundedCounter); ok {
		_, ok := bc.CountWithin(text, limit)
		return ok
	}
	return b.Tokenizer.Count(text) <= limit
}
