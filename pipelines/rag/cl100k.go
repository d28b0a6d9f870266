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
	// longest is the length in bytes of the longest token: no longer part of a
	// piece can be a token, so its rank is not looked up.
	longest int
	slow    TiktokenCounter
}

var _ Tokenizer = (*Cl100k)(nil)

func (c *Cl100k) load() {
	ranks, err := tiktokenloader.NewOfflineLoader().LoadTiktokenBpe("cl100k_base.tiktoken")
	if err == nil {
		c.ranks = ranks
		for t := range ranks {
			c.longest = max(c.longest, len(t))
		}
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

// longPiece is the length in bytes past which a piece's merges are found with a
// heap (longPieceTokens): each merge of the scan below looks at every part, so a
// piece of n bytes costs O(n²), and one long run of letters or of punctuation
// (64 KB of "a" took 6.7 s) let a single task's input hold a core for minutes.
const longPiece = 256

// pieceTokens returns the tokens of one piece: byte-pair merges by rank, lowest
// first and leftmost among equals, as tiktoken merges them.
func (c *Cl100k) pieceTokens(p string) int {
	if len(p) <= 1 {
		return 1
	}
	if len(p) > longPiece {
		return c.longPieceTokens(p)
	}
	if _, ok := c.ranks[p]; ok {
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

// longPieceTokens is pieceTokens for a long piece, in O(n log n): the parts form a
// linked list, and a heap holds each pair's rank keyed by (rank, start), so the
// pair it gives first is the one the scan would find (lowest rank, leftmost). An
// entry whose pair changed since is skipped when it comes up.
func (c *Cl100k) longPieceTokens(p string) int {
	n := len(p)
	if n <= c.longest {
		if _, ok := c.ranks[p]; ok {
			return 1
		}
	}
	const none = int(^uint(0) >> 1)
	// Part i starts at byte i; next[i] is the start of the part after it (n: none),
	// prev[i] the one before (-1: none, -2: merged into the part before); rank[i]
	// is the rank of part i merged with the next one, or none.
	next := make([]int32, n)
	prev := make([]int32, n)
	rank := make([]int, n)
	rankOf := func(i int) int {
		j := int(next[i])
		if j >= n {
			return none
		}
		end := n
		if k := int(next[j]); k < n {
			end = k
		}
		if end-i > c.longest {
			return none
		}
		if r, ok := c.ranks[p[i:end]]; ok {
			return r
		}
		return none
	}
	for i := range n {
		next[i], prev[i] = int32(i+1), int32(i-1)
	}
	h := pairHeap{}
	for i := range n {
		rank[i] = rankOf(i)
		if rank[i] != none {
			h = append(h, pair{rank[i], int32(i)})
		}
	}
	h.init()
	parts := n
	for len(h) > 0 {
		top := h.pop()
		i := int(top.at)
		if prev[i] == -2 || rank[i] != top.rank {
			continue // stale: the pair changed since it was pushed
		}
		// Merge part i with the next one, j.
		j := int(next[i])
		next[i] = next[j]
		if k := int(next[j]); k < n {
			prev[k] = int32(i)
		}
		prev[j], rank[j] = -2, none
		parts--
		if rank[i] = rankOf(i); rank[i] != none {
			h.push(pair{rank[i], int32(i)})
		}
		if k := int(prev[i]); k >= 0 {
			if rank[k] = rankOf(k); rank[k] != none {
				h.push(pair{rank[k], int32(k)})
			}
		}
	}
	return parts
}

// pair is a heap entry: a part's rank with the next part, and the part's start.
type pair struct {
	rank int
	at   int32
}

// pairHeap is a min-heap of pairs by (rank, at).
type pairHeap []pair

func (h pairHeap) less(a, b int) bool {
	return h[a].rank < h[b].rank || h[a].rank == h[b].rank && h[a].at < h[b].at
}

func (h pairHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *pairHeap) push(x pair) {
	*h = append(*h, x)
	i := len(*h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		(*h)[i], (*h)[parent] = (*h)[parent], (*h)[i]
		i = parent
	}
}

func (h *pairHeap) pop() pair {
	old := *h
	top := old[0]
	last := len(old) - 1
	old[0] = old[last]
	*h = old[:last]
	h.down(0)
	return top
}

func (h pairHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
