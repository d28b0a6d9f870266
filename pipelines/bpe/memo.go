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
// one, is counted from them (derive), exactly.
//
// Why that is exact. Merging a piece merges, again and again, the adjacent pair
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
// prefix and suffix whole.
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
// which derive looks for a token start to count from, nearest first.
var reaches = [...]int{256, 2048, 16384}

// prefix returns the count of e.p[:l].
func (e merged) prefix(t *table, l int) (int, bool) {
	if l == len(e.p) {
		return len(e.starts), true
	}
	for _, d := range reaches {
		// i: the last token that starts at or before l-d; X: its start.
		i := sort.Search(len(e.starts), func(k int) bool { return int(e.starts[k]) > l-d }) - 1
		if i < 1 {
			return 0, false // the prefix is short: merging it whole costs little
		}
		x := int(e.starts[i])
		b := t.mergeStarts(e.p[x:l])
		bEnd := l
		if len(b) > 1 {
			bEnd = x + int(b[1])
		}
		if a := int(e.starts[i-1]); t.keeps(e.p[a:bEnd], x-a) {
			return i + len(b), true
		}
	}
	return 0, false
}

// suffix returns the count of e.p[m:], m > 0.
func (e merged) suffix(t *table, m int) (int, bool) {
	for _, d := range reaches {
		// i: the first token that starts at or after m+d; Y: its start.
		i := sort.Search(len(e.starts), func(k int) bool { return int(e.starts[k]) >= m+d })
		if i >= len(e.starts) {
			return 0, false
		}
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
