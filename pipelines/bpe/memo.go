package bpe

import (
	"sort"
	"sync"
)

// memoPiece is the length in bytes from which a piece's merges are kept
// (pieceMemo): a search for where to cut a long text counts many prefixes or
// suffixes of the same long piece, and each is counted from the piece's merges
// with a few hundred bytes merged anew instead of merged whole.
const memoPiece = 4096

// memoPieces is how many long pieces a Counter keeps the merges of: a build cuts
// one text at a time, a few at most.
const memoPieces = 4

// pieceMemo holds the merges of the last long pieces counted: each piece and
// where its tokens start. A piece that is one of them, or a prefix or a suffix of
// one, is counted from them (merged.prefix, merged.suffix), exactly.
//
// Why that is exact. The pieces kept are longer than any token, so their count is
// their merges' (pieceTokens' rule that a piece which is a token counts one does
// not apply to them, nor to their prefixes and suffixes counted here). Merging a
// piece merges, again and again, the adjacent pair
// of parts of lowest rank, the leftmost among equals; a merge changes only the
// two parts it joins and the pairs they are in. Let X be a boundary between two
// parts that no merge of the piece AB (A before X, B after) ever crosses. Then
// each merge of AB is one of A's or one of B's, and is the lowest (and leftmost)
// among A's pairs, or B's, at its time: A's merges in AB are A's merges alone, in
// the same order, and the same for B, so AB's tokens are A's then B's. So:
//
//  1. If X is where a token of the piece P starts, P's tokens before X are the
//     tokens of P[:X], and those from X are the tokens of P[X:].
//  2. Whether a merge of AB crosses X depends only on the last token a of A and
//     the first token b of B: until the first merge that crosses X, the parts
//     within a, the pair across X and the parts within b change only by their own
//     merges, each the lowest and leftmost of them at its time (the parts of a
//     and of b never join a part outside them: A's merges and B's are their own),
//     so that first merge across X is also one of the merges of the text ab
//     alone. So if X stays a boundary when ab is merged alone, AB's tokens are A's
//     then B's.
//
// A prefix P[:L] is then counted as P's tokens before a token start X a little
// before L (1), plus the tokens of P[X:L] merged anew, once the merge of the last
// token before X with the first of P[X:L] is seen to keep X (2); a suffix the
// same way round. If it is not kept, X is taken further back; failing that, the
// prefix is merged whole. TestMemoCountsAsMerging holds this to merging each
// prefix and suffix whole. mergeLong joins the chunks of a long piece by the
// same two steps.
//
// The memo keeps a reference to each piece's text (a part of a text a caller
// counted) and four bytes a token; it never holds more than memoPieces pieces.
type pieceMemo struct {
	mu     sync.Mutex
	pieces [memoPieces]merged
	last   int // the index of the piece added last
}

// merged is a piece and where its tokens start (mergeStarts).
type merged struct {
	p      string
	starts []int32
}

// count returns the tokens of q (at least memoPiece bytes, longer than any token)
// if q is a kept piece, a prefix or a suffix of one and its count can be derived.
func (m *pieceMemo) count(t *table, q string) (int, bool) {
	m.mu.Lock()
	pieces := m.pieces
	m.mu.Unlock()
	for _, e := range pieces {
		switch {
		case len(e.p) < len(q):
		case e.p[:len(q)] == q:
			if n, ok := e.prefix(t, len(q)); ok {
				return n, true
			}
		case e.p[len(e.p)-len(q):] == q:
			if n, ok := e.suffix(t, len(e.p)-len(q)); ok {
				return n, true
			}
		}
	}
	return 0, false
}

// add keeps the merges of p.
func (m *pieceMemo) add(p string, starts []int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = (m.last + 1) % memoPieces
	m.pieces[m.last] = merged{p, starts}
}

// reaches are the distances before a prefix's end (after a suffix's start) at
// which a token start is looked for to count from, nearest first.
var reaches = [...]int{0, 256, 2048, 16384}

// prefix returns the count of e.p[:l].
func (e merged) prefix(t *table, l int) (int, bool) {
	if l == len(e.p) {
		return len(e.starts), true
	}
	i, b, ok := t.rejoin(e.p, e.starts, l-1, l)
	return i + len(b), ok
}

// rejoin finds the tokens of p[:end] from tokens known before it: starts[:k]
// are the tokens of p[:starts[k]] for each k (so are a prefix's tokens, as
// where a piece's tokens start are, by 1 of pieceMemo), and a token start at or
// before from, further back at each try, is one that the tokens of p from it to
// end merged anew (b, from it) keep (2). The tokens of p[:end] are then
// starts[:i] and b. It fails if none of the starts within 16 KiB of from is.
func (t *table) rejoin(p string, starts []int32, from, end int) (i int, b []int32, ok bool) {
	prev := -1
	for _, d := range reaches {
		// i: the last token that starts at or before from-d.
		i = sort.Search(len(starts), func(k int) bool { return int(starts[k]) > from-d }) - 1
		if i < 1 {
			return 0, nil, false // near the start: merging whole costs little
		}
		if i == prev {
			continue
		}
		prev = i
		x := int(starts[i])
		b = t.mergeStarts(p[x:end])
		bEnd := end
		if len(b) > 1 {
			bEnd = x + int(b[1])
		}
		if a := int(starts[i-1]); t.keeps(p[a:bEnd], x-a) {
			return i, b, true
		}
	}
	return 0, nil, false
}

// chunk is the length of the parts mergeLong merges a long piece in.
const chunk = 8192

// mergeLong is mergeStarts for a long piece, in parts: the tokens of each next
// chunk of the piece merged alone are joined to those of the piece before it
// (rejoin), so that each merge's heap and lists are of a few kilobytes, not of
// the whole piece (a megabyte merged whole spends most of its time waiting on
// memory). If a join fails the piece is merged whole.
func (t *table) mergeLong(p string) []int32 { return t.mergeInChunks(p, chunk) }

// mergeInChunks is mergeLong in chunks of size bytes.
func (t *table) mergeInChunks(p string, size int) []int32 {
	if len(p) <= 2*size {
		return t.mergeStarts(p)
	}
	starts := t.mergeStarts(p[:size])
	for x := size; x < len(p); {
		end := x + size
		if len(p)-end < size {
			end = len(p)
		}
		known := append(starts, int32(x)) // p[:x]'s tokens, then where the next starts
		i, b, ok := t.rejoin(p, known, x, end)
		if !ok {
			return t.mergeStarts(p)
		}
		xb := known[i]
		starts = known[:i]
		for _, st := range b {
			starts = append(starts, xb+st)
		}
		x = end
	}
	return starts
}

// suffix returns the count of e.p[m:], m > 0.
func (e merged) suffix(t *table, m int) (int, bool) {
	prev := -1
	for _, d := range reaches {
		// i: the first token that starts after m+d; Y: its start.
		i := sort.Search(len(e.starts), func(k int) bool { return int(e.starts[k]) > m+d })
		if i >= len(e.starts) {
			return 0, false
		}
		if i == prev {
			continue
		}
		prev = i
		y := int(e.starts[i])
		a := t.mergeStarts(e.p[m:y])
		aStart := m + int(a[len(a)-1])
		bEnd := len(e.p)
		if i+1 < len(e.starts) {
			bEnd = int(e.starts[i+1])
		}
		if t.keeps(e.p[aStart:bEnd], y-aStart) {
			return len(a) + len(e.starts) - i, true
		}
	}
	return 0, false
}

// keeps reports whether the boundary at x of s, two tokens side by side, stays
// one when s is merged.
func (t *table) keeps(s string, x int) bool {
	for _, st := range t.mergeStarts(s) {
		if int(st) == x {
			return true
		}
	}
	return false
}
