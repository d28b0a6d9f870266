package rag

import (
	"sync"
	"unicode"
	"unicode/utf8"

	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// Cl100k counts tokens exactly as TiktokenCounter does (OpenAI's cl100k_base),
// for the counts a session makes on every model call: it splits a text into the
// encoding's pieces with a scanner written for cl100k_base's pattern instead of a
// backtracking regular expression, and merges each piece's byte pairs in a buffer
// on the stack, so a count allocates nothing once the ranks are loaded.
// TestCl100kCountsAsTiktoken holds it to TiktokenCounter's counts over random
// and real texts; a text that is not valid UTF-8 is counted by TiktokenCounter
// itself, and so is every text when the ranks cannot be loaded.
//
// The zero value is ready to use and safe for concurrent use; the ranks (compiled
// into the binary by tiktoken-go-loader) are loaded on the first Count.
type Cl100k struct {
	once  sync.Once
	ranks map[string]int
	slow  TiktokenCounter
}

var _ Tokenizer = (*Cl100k)(nil)

func (c *Cl100k) load() {
	ranks, err := tiktokenloader.NewOfflineLoader().LoadTiktokenBpe("cl100k_base.tiktoken")
	if err == nil {
		c.ranks = ranks
	}
}

// Count implements Tokenizer.
func (c *Cl100k) Count(text string) int {
	c.once.Do(c.load)
	if c.ranks == nil || !utf8.ValidString(text) {
		return c.slow.Count(text)
	}
	n := 0
	for i := 0; i < len(text); {
		j := nextPiece(text, i)
		n += c.pieceTokens(text[i:j])
		i = j
	}
	return n
}

// nextPiece returns the end of the piece that starts at i, as cl100k_base's
// pattern matches it (leftmost alternative first, greedy, backtracking):
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// with \s, \p{L} and \p{N} as the regular expression engine reads them
// (unicode.IsSpace, unicode.IsLetter, unicode.IsNumber) and case folded by
// unicode.ToLower.
func nextPiece(s string, i int) int {
	r, w := utf8.DecodeRuneInString(s[i:])
	// 's 't 're 've 'm 'll 'd
	if r == '\'' && i+w < len(s) {
		a, aw := utf8.DecodeRuneInString(s[i+w:])
		switch unicode.ToLower(a) {
		case 's', 't', 'm', 'd':
			return i + w + aw
		case 'r', 'v', 'l':
			if k := i + w + aw; k < len(s) {
				b, bw := utf8.DecodeRuneInString(s[k:])
				want := rune('e')
				if unicode.ToLower(a) == 'l' {
					want = 'l'
				}
				if unicode.ToLower(b) == want {
					return k + bw
				}
			}
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if unicode.IsLetter(r) {
		return letters(s, i+w)
	}
	if r != '\r' && r != '\n' && !unicode.IsNumber(r) && i+w < len(s) {
		if b, _ := utf8.DecodeRuneInString(s[i+w:]); unicode.IsLetter(b) {
			return letters(s, i+w)
		}
	}
	// \p{N}{1,3}
	if unicode.IsNumber(r) {
		j := i + w
		for k := 1; k < 3 && j < len(s); k++ {
			b, bw := utf8.DecodeRuneInString(s[j:])
			if !unicode.IsNumber(b) {
				break
			}
			j += bw
		}
		return j
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	if j := i; true {
		if r == ' ' {
			j += w
		}
		if k := others(s, j); k > j {
			for k < len(s) && (s[k] == '\r' || s[k] == '\n') {
				k++
			}
			return k
		}
	}
	// The rest are runs of white space: r is one (every other rune matched above).
	j, lastNewline := i, -1
	for j < len(s) {
		b, bw := utf8.DecodeRuneInString(s[j:])
		if !unicode.IsSpace(b) {
			break
		}
		if b == '\r' || b == '\n' {
			lastNewline = j + bw
		}
		j += bw
	}
	switch {
	case lastNewline > 0: // \s*[\r\n]+
		return lastNewline
	case j == len(s): // \s+(?!\S) at the end
		return j
	}
	// \s+(?!\S): all but the run's last rune, if that leaves one; else \s+.
	_, lw := utf8.DecodeLastRuneInString(s[i:j])
	if j-lw > i {
		return j - lw
	}
	return j
}

// letters returns the end of the run of letters from j (at least one there).
func letters(s string, j int) int {
	for j < len(s) {
		b, bw := utf8.DecodeRuneInString(s[j:])
		if !unicode.IsLetter(b) {
			break
		}
		j += bw
	}
	return j
}

// others returns the end of the run from j of runes that are neither white
// space, letters nor numbers.
func others(s string, j int) int {
	for j < len(s) {
		b, bw := utf8.DecodeRuneInString(s[j:])
		if unicode.IsSpace(b) || unicode.IsLetter(b) || unicode.IsNumber(b) {
			break
		}
		j += bw
	}
	return j
}

// pieceTokens returns the tokens of one piece: byte-pair merges by rank, lowest
// first and leftmost among equals, as tiktoken merges them.
func (c *Cl100k) pieceTokens(p string) int {
	if _, ok := c.ranks[p]; ok || len(p) <= 1 {
		return 1
	}
	const none = int(^uint(0) >> 1)
	var stack [64][2]int
	var parts [][2]int
	if len(p)+1 <= len(stack) {
		parts = stack[:len(p)+1]
	} else {
		parts = make([][2]int, len(p)+1)
	}
	for i := range parts {
		parts[i] = [2]int{i, none}
	}
	rank := func(i, skip int) int {
		if i+skip+2 < len(parts) {
			if r, ok := c.ranks[p[parts[i][0]:parts[i+skip+2][0]]]; ok {
				return r
			}
		}
		return none
	}
	for i := 0; i < len(parts)-2; i++ {
		parts[i][1] = rank(i, 0)
	}
	for len(parts) > 1 {
		minRank, minAt := none, -1
		for i := 0; i < len(parts)-1; i++ {
			if parts[i][1] < minRank {
				minRank, minAt = parts[i][1], i
			}
		}
		if minAt < 0 {
			break
		}
		i := minAt
		parts[i][1] = rank(i, 1)
		if i > 0 {
			parts[i-1][1] = rank(i-1, 1)
		}
		parts = append(parts[:i+1], parts[i+2:]...)
	}
	return len(parts) - 1
}
