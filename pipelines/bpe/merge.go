package bpe

import "math"

// table is an encoding loaded: its ranks and the scanner of its pattern.
type table struct {
	ranks map[string]int
	// longest is the length in bytes of the longest token: no longer part of a
	// piece can be a token, so its rank is not looked up.
	longest int
	// next returns the end of the piece that starts at i (at least i+1).
	next func(s string, i int) int
	// twoBytes holds the rank of each two bytes, a<<8|b, or -1 (pairRanks): the
	// first pairs of a merge are looked up there rather than in ranks.
	twoBytes []int32
}

// pairRanks returns table.twoBytes of ranks.
func pairRanks(ranks map[string]int) []int32 {
	out := make([]int32, 1<<16)
	var b [2]byte
	for i := range out {
		b[0], b[1] = byte(i>>8), byte(i)
		out[i] = -1
		if r, ok := ranks[string(b[:])]; ok && r < math.MaxInt32 {
			out[i] = int32(r)
		}
	}
	return out
}

// longPiece is the length in bytes past which a piece's merges are found with a
// heap (longPieceTokens): each merge of the scan below looks at every part, so a
// piece of n bytes costs O(n²), and one long run of letters or of punctuation
// (64 KB of "a" took 6.7 s) let a single task's input hold a core for minutes.
const longPiece = 256

// pieceTokens returns the tokens of one piece: byte-pair merges by rank, lowest
// first and leftmost among equals, as tiktoken merges them, and one token for a
// piece that is a token itself.
func (t *table) pieceTokens(p string) int {
	if len(p) <= 1 {
		return 1
	}
	if len(p) > longPiece {
		return t.longPieceTokens(p)
	}
	if _, ok := t.ranks[p]; ok {
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
			if r, ok := t.ranks[p[parts[i][0]:parts[i+skip+2][0]]]; ok {
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

// longPieceTokens is pieceTokens for a long piece, in O(n log n) (merge).
func (t *table) longPieceTokens(p string) int {
	n := len(p)
	if n >= math.MaxInt32 {
		return n // parts are indexed by int32; no text this large is counted
	}
	if n <= t.longest {
		if _, ok := t.ranks[p]; ok {
			return 1
		}
	}
	_, parts := t.merge(p)
	return parts
}

// mergeStarts returns where the tokens of p start, as merge leaves them: the
// merges alone, without pieceTokens' rule that a piece which is a token is one
// (which is the same for a piece longer than any token). p is shorter than
// math.MaxInt32 bytes.
func (t *table) mergeStarts(p string) []int32 {
	next, parts := t.merge(p)
	starts := make([]int32, 0, parts)
	for i := 0; i < len(p); i = int(next[i]) {
		starts = append(starts, int32(i))
	}
	return starts
}

// merge runs the byte-pair merges of p (non-empty, shorter than math.MaxInt32
// bytes) in O(n log n): the parts form a linked list, and a heap holds each
// pair's rank keyed by (rank, start), so the pair it gives first is the one
// pieceTokens' scan would find (lowest rank, leftmost). An entry whose pair
// changed since is skipped when it comes up. It returns the number of parts left
// and next, where next[i] is the start of the part after the one that starts at
// i (len(p) after the last), for each part start i.
func (t *table) merge(p string) (next []int32, parts int) {
	n := len(p)
	const none = int32(^uint32(0) >> 1)
	// Part i starts at byte i; next[i] is the start of the part after it (n: none),
	// prev[i] the one before (-1: none, -2: merged into the part before); rank[i]
	// is the rank of part i merged with the next one, or none.
	next = make([]int32, n)
	prev := make([]int32, n)
	rank := make([]int32, n)
	rankOf := func(i int) int32 {
		j := int(next[i])
		if j >= n {
			return none
		}
		end := n
		if k := int(next[j]); k < n {
			end = k
		}
		if end-i > t.longest {
			return none
		}
		if end-i == 2 && t.twoBytes != nil {
			if r := t.twoBytes[int(p[i])<<8|int(p[i+1])]; r >= 0 {
				return r
			}
			return none
		}
		if r, ok := t.ranks[p[i:end]]; ok {
			return int32(r)
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
			h = append(h, pairOf(rank[i], i))
		}
	}
	h.init()
	parts = n
	for len(h) > 0 {
		top := h.pop()
		i := top.at()
		if prev[i] == -2 || rank[i] != top.rank() {
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
			h.push(pairOf(rank[i], i))
		}
		if k := int(prev[i]); k >= 0 {
			if rank[k] = rankOf(k); rank[k] != none {
				h.push(pairOf(rank[k], k))
			}
		}
	}
	return next, parts
}

// pair is a heap entry: a part's rank with the next part, and the part's start,
// in one number that orders pairs by (rank, start).
type pair uint64

func pairOf(rank int32, at int) pair { return pair(uint64(rank)<<32 | uint64(uint32(at))) }

func (p pair) rank() int32 { return int32(p >> 32) }

func (p pair) at() int { return int(uint32(p)) }

// pairHeap is a min-heap of pairs by (rank, at).
type pairHeap []pair

func (h pairHeap) less(a, b int) bool { return h[a] < h[b] }

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
