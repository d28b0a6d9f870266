package gateway

import (
	"fmt"
	"sync"

	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// Tiktoken counts tokens with OpenAI's BPE encodings, loaded from files compiled into
// the binary (tiktoken-go-loader), so counting needs no network.
type Tiktoken struct {
	enc *tiktoken.Tiktoken
}

var _ Tokenizer = (*Tiktoken)(nil)

// installLoader sets tiktoken's BPE loader to the offline one. tiktoken-go keeps its
// loader in a package variable; installing the same offline loader once is all this
// package ever does to it.
var installLoader = sync.OnceFunc(func() { tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader()) })

// NewTiktoken returns a tokenizer for an encoding such as "cl100k_base" or "o200k_base".
func NewTiktoken(encoding string) (*Tiktoken, error) {
	installLoader()
	enc, err := tiktoken.GetEncoding(encoding)
	if err != nil {
		return nil, fmt.Errorf("gateway: tiktoken encoding %q: %w", encoding, err)
	}
	return &Tiktoken{enc: enc}, nil
}

// Count implements Tokenizer.
func (t *Tiktoken) Count(text string) int {
	return len(t.enc.Encode(text, nil, nil))
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
