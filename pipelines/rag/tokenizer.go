package rag

import (
	"fmt"
	"sync"

	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// Tokenizer counts the tokens of a text as the embedding model will. Count must be
// deterministic and safe for concurrent use.
type Tokenizer interface {
	Count(text string) int
}

// cl100kPattern is cl100k_base's pre-tokenisation pattern, as tiktoken-go defines it.
const cl100kPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// TiktokenCounter counts tokens with OpenAI's cl100k_base encoding (the encoding of
// text-embedding-3 and text-embedding-ada-002), whose ranks are compiled into the
// binary by tiktoken-go-loader, so counting needs no network. The zero value is
// ready to use: the encoding is loaded on the first Count (it takes a few hundred
// milliseconds), once, and a TiktokenCounter is then safe for concurrent use.
//
// Special tokens such as "<|endoftext|>" in the text are counted as ordinary text.
// If the encoding cannot be loaded, Count returns the text's length in bytes, which
// is never less than its cl100k_base token count, so a budget still holds; Err
// says why.
type TiktokenCounter struct {
	once sync.Once
	enc  *tiktoken.Tiktoken
	err  error
}

var _ Tokenizer = (*TiktokenCounter)(nil)

// load builds the cl100k_base encoder from the offline ranks, without touching
// tiktoken-go's package-level loader.
func (c *TiktokenCounter) load() {
	ranks, err := tiktokenloader.NewOfflineLoader().LoadTiktokenBpe("cl100k_base.tiktoken")
	if err != nil {
		c.err = fmt.Errorf("rag: load cl100k_base ranks: %w", err)
		return
	}
	special := map[string]int{
		tiktoken.ENDOFTEXT:   100257,
		tiktoken.FIM_PREFIX:  100258,
		tiktoken.FIM_MIDDLE:  100259,
		tiktoken.FIM_SUFFIX:  100260,
		tiktoken.ENDOFPROMPT: 100276,
	}
	bpe, err := tiktoken.NewCoreBPE(ranks, special, cl100kPattern)
	if err != nil {
		c.err = fmt.Errorf("rag: build cl100k_base encoder: %w", err)
		return
	}
	set := map[string]any{}
	for k := range special {
		set[k] = true
	}
	c.enc = tiktoken.NewTiktoken(bpe, &tiktoken.Encoding{
		Name:           "cl100k_base",
		PatStr:         cl100kPattern,
		MergeableRanks: ranks,
		SpecialTokens:  special,
	}, set)
}

// Count implements Tokenizer.
func (c *TiktokenCounter) Count(text string) int {
	c.once.Do(c.load)
	if c.enc == nil {
		return len(text)
	}
	return len(c.enc.EncodeOrdinary(text))
}

// Err reports why the encoding could not be loaded, or nil. It loads the encoding
// if no Count has yet.
func (c *TiktokenCounter) Err() error {
	c.once.Do(c.load)
	return c.err
}
