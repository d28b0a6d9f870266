package gateway

import (
	"fmt"
	"sync"

	"github.com/troupe-run/troupe/pipelines/bpe"
)

// Tiktoken counts tokens with one of OpenAI's BPE encodings (bpe.Encodings:
// cl100k_base, o200k_base, …), loaded from files compiled into the binary, so
// counting needs no network. It counts as tiktoken does, in O(n log n) whatever
// the text (tiktoken-go's merges take time that grows with the square of an
// unbroken piece's length), special tokens as ordinary text, and each byte that
// is not valid UTF-8 as U+FFFD (as the request carries it); see bpe.Counter.
type Tiktoken struct {
	c *bpe.Counter
}

var _ Tokenizer = (*Tiktoken)(nil)

// NewTiktoken returns a tokenizer for an encoding such as "cl100k_base" or "o200k_base".
func NewTiktoken(encoding string) (*Tiktoken, error) {
	c, err := bpe.New(encoding)
	if err != nil {
		return nil, fmt.Errorf("gateway: tiktoken encoding %q: %w", encoding, err)
	}
	return &Tiktoken{c: c}, nil
}

// Count implements Tokenizer.
func (t *Tiktoken) Count(text string) int {
	return t.c.Count(text)
}

// LazyTiktoken is a Tokenizer that loads the encoding on first use (loading takes a
// few hundred milliseconds, which a node that never needs it should not pay) and
// falls back to llm's offline estimate if the encoding cannot be loaded.
type LazyTiktoken struct {
	Encoding string
	once     sync.Once
	tk       *Tiktoken
}

// Count implements Tokenizer.
func (l *LazyTiktoken) Count(text string) int {
	l.once.Do(func() {
		enc := l.Encoding
		if enc == "" {
			enc = "cl100k_base"
		}
		l.tk, _ = NewTiktoken(enc) // on failure, the estimate below is used
	})
	if l.tk == nil {
		return len(text)/4 + 1
	}
	return l.tk.Count(text)
}
