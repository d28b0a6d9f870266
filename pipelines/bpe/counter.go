package bpe

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"unicode/utf8"

	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// ErrUnknownEncoding is the error of an encoding name that is not one of
// Encodings.
var ErrUnknownEncoding = errors.New("bpe: unknown encoding")

// Encodings returns the names of the encodings a Counter counts.
func Encodings() []string {
	return []string{"cl100k_base", "o200k_base", "p50k_base", "p50k_edit", "r50k_base"}
}

// encoding returns the file of an encoding's ranks and the scanner of its
// pattern (split.go).
func encoding(name string) (file string, next func(s string, i int) int, ok bool) {
	switch name {
	case "", "cl100k_base":
		return "cl100k_base.tiktoken", cl100kNext, true
	case "o200k_base":
		return "o200k_base.tiktoken", o200kNext, true
	case "p50k_base", "p50k_edit":
		return "p50k_base.tiktoken", gpt2Next, true
	case "r50k_base":
		return "r50k_base.tiktoken", gpt2Next, true
	}
	return "", nil, false
}

// Counter counts tokens in one tiktoken encoding. Special tokens such as
// "<|endoftext|>" in a text are counted as ordinary text.
//
// A text that is not valid UTF-8 is counted with each byte that is not part of
// a valid UTF-8 sequence replaced by U+FFFD: that is the text a model is sent
// (encoding/json replaces each such byte the same way), and it is how
// tiktoken-go counts such a text (it reads the text as runes). OpenAI's tiktoken
// takes only valid Unicode text; its byte-level merges of raw invalid bytes would
// count a text that no request carries.
//
// A Counter keeps the merges of the last few long pieces it counted (pieceMemo),
// so that a prefix or a suffix of one (each try of a search for where to cut a
// long text) is counted from them with a few hundred bytes merged anew; the
// counts are the same as merging each piece whole.
//
// The zero value counts cl100k_base and is ready to use; a Counter is safe for
// concurrent use. The ranks are loaded on the first Count (a few hundred
// milliseconds) and never change after, so a count allocates nothing for a valid
// UTF-8 text. If they cannot be loaded, Count returns the text's length in bytes
// and Err says why.
type Counter struct {
	// Encoding names the encoding, one of Encodings; empty means cl100k_base.
	// Set it before the first Count.
	Encoding string

	once sync.Once
	t    table
	err  error
	memo pieceMemo
}

// New returns a Counter of an encoding with its ranks loaded, or an error
// (ErrUnknownEncoding for a name not in Encodings).
func New(encoding string) (*Counter, error) {
	c := &Counter{Encoding: encoding}
	if err := c.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Counter) load() {
	file, next, ok := encoding(c.Encoding)
	if !ok {
		c.err = fmt.Errorf("%w %q", ErrUnknownEncoding, c.Encoding)
		return
	}
	ranks, err := tiktokenloader.NewOfflineLoader().LoadTiktokenBpe(file)
	if err != nil {
		c.err = fmt.Errorf("bpe: load %s: %w", file, err)
		return
	}
	c.t = table{ranks: ranks, next: next, twoBytes: pairRanks(ranks)}
	for t := range ranks {
		c.t.longest = max(c.t.longest, len(t))
	}
}

// Err reports why the encoding could not be loaded, or nil. It loads the
// encoding if no Count has yet.
func (c *Counter) Err() error {
	c.once.Do(c.load)
	return c.err
}

// Count returns the number of tokens of text.
func (c *Counter) Count(text string) int {
	n, _ := c.CountWithin(text, math.MaxInt)
	return n
}

// CountWithin counts the tokens of text while they stay within limit: it returns
// Count(text) and true when that is at most limit, and otherwise a number past
// limit and false, having stopped at the first piece that took the count past it:
// the count of the text up to that piece, that piece's count or, for a long piece,
// a bound below it (a token is at most as long as the encoding's longest, so a
// piece of b bytes counts at least b divided by that). The answer is exact, since a
// text's count is the sum of its pieces' counts; it costs the work of about limit
// tokens of text, not of all of it, which is what a search for the longest part of
// a long text within a budget needs. Without the bound, one long piece (a
// megabyte of letters without a space) was counted whole at every try of such a
// search: 20 tries of 0.3 s for each decision of a task holding one.
func (c *Counter) CountWithin(text string, limit int) (int, bool) {
	c.once.Do(c.load)
	if c.t.ranks == nil {
		return len(text), len(text) <= limit
	}
	if !utf8.ValidString(text) {
		text = replaceInvalid(text)
	}
	n := 0
	for i := 0; i < len(text); {
		j := c.t.next(text, i)
		if j-i > longPiece && c.t.longest > 0 {
			if low := n + (j-i+c.t.longest-1)/c.t.longest; low > limit {
				return low, false
			}
		}
		if n += c.pieceTokens(text[i:j]); n > limit {
			return n, false
		}
		i = j
	}
	return n, n <= limit
}

// pieceTokens is table.pieceTokens, with the merges of long pieces kept
// (pieceMemo): a piece that is a prefix or a suffix of one counted before (the
// tries of a search for where to cut a text) is counted from its merges.
func (c *Counter) pieceTokens(p string) int {
	if len(p) < memoPiece || len(p) <= c.t.longest || len(p) >= math.MaxInt32 {
		return c.t.pieceTokens(p)
	}
	if n, ok := c.memo.count(&c.t, p); ok {
		return n
	}
	starts := c.t.mergeLong(p)
	c.memo.add(p, starts)
	return len(starts)
}

// replaceInvalid returns s with each byte that is not part of a valid UTF-8
// sequence replaced by U+FFFD, as []rune(s) reads it (strings.ToValidUTF8
// replaces a run of such bytes by one).
func replaceInvalid(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 16)
	valid := 0 // start of the valid run not yet written
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && w == 1 {
			b.WriteString(s[valid:i])
			b.WriteString("\uFFFD")
			valid = i + 1
		}
		i += w
	}
	b.WriteString(s[valid:])
	return b.String()
}
