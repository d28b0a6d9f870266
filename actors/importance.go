package actors

import (
	"math"
	"slices"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// importanceRank memoises what importance filtering (importantParts) weighs, so
// that a step costs what it sends, not the session's history: each complete turn's
// importance and tokens, and the turns that left the window ranked as the filter
// walks them (by importance, highest first; the newer first among equals). It is
// derived from the history alone (a turn is complete once another follows it, and
// the history only grows), so a refold rebuilds it as it was.
type importanceRank struct {
	// turns are the complete turns' weights, by turn index.
	turns []turnWeight
	// ranked is how many turns, from the first, levels hold.
	ranked int
	// levels are the ranked turns by importance, highest first.
	levels []importanceLevel
	// kept is importantParts' scratch: the turns before the window it sends.
	kept []int
}

// turnWeight is a turn's importance (pctx.TurnImportance) and its tokens
// (llm.EstimateTokens).
type turnWeight struct{ score, tokens int }

func weighTurn(turn []messages.ChatMessage) turnWeight {
	return turnWeight{score: pctx.TurnImportance(turn), tokens: llm.EstimateTokens(turn)}
}

// importanceLevel is the ranked turns of one importance, oldest first, and their
// tokens, for finding the newest that fits a budget without looking at the others.
type importanceLevel struct {
	score  int
	turns  []int
	tokens minTree
}

// weights brings r up to the history's turns: it weighs the complete turns not
// weighed yet and ranks those before the window's first turn (recent).
func (r *importanceRank) weigh(history []messages.ChatMessage, turns []pctx.TurnSpan, recent int) {
	for i := len(r.turns); i < len(turns)-1; i++ {
		r.turns = append(r.turns, weighTurn(history[turns[i].Start:turns[i].End]))
	}
	for ; r.ranked < min(recent, len(r.turns)); r.ranked++ {
		w := r.turns[r.ranked]
		k := 0
		for k < len(r.levels) && r.levels[k].score > w.score {
			k++
		}
		if k == len(r.levels) || r.levels[k].score != w.score {
			r.levels = slices.Insert(r.levels, k, importanceLevel{score: w.score})
		}
		r.levels[k].turns = append(r.levels[k].turns, r.ranked)
		r.levels[k].tokens.push(w.tokens)
	}
}

// minTree is a segment tree of the minimum over an append-only list of ints: it
// finds the last value at or before a position that is at most a bound in
// O(log n), however many values above the bound are in between.
type minTree struct {
	n    int   // values pushed
	size int   // leaves (a power of two); leaf i is tree[size+i]
	tree []int // tree[1] is the root; unused leaves are math.MaxInt
}

func (t *minTree) push(v int) {
	if t.n == t.size {
		size := max(2*t.size, 16)
		tree := make([]int, 2*size)
		for i := range tree {
			tree[i] = math.MaxInt
		}
		copy(tree[size:], t.tree[t.size:t.size+t.n])
		for i := size - 1; i >= 1; i-- {
			tree[i] = min(tree[2*i], tree[2*i+1])
		}
		t.size, t.tree = size, tree
	}
	i := t.size + t.n
	t.tree[i] = v
	for i /= 2; i >= 1; i /= 2 {
		t.tree[i] = min(t.tree[2*i], t.tree[2*i+1])
	}
	t.n++
}

// lastAtMost returns the last position at or before p whose value is at most
// bound, or −1 for none.
func (t *minTree) lastAtMost(p, bound int) int {
	if p < 0 || t.n == 0 || t.tree[1] > bound {
		return -1
	}
	return t.search(1, 0, t.size, min(p, t.n-1), bound)
}

// search looks in node, which covers positions [lo, hi).
func (t *minTree) search(node, lo, hi, p, bound int) int {
	if lo > p || t.tree[node] > bound {
		return -1
	}
	if hi-lo == 1 {
		return lo
	}
	mid := (lo + hi) / 2
	if k := t.search(2*node+1, mid, hi, p, bound); k >= 0 {
		return k
	}
	return t.search(2*node, lo, mid, p, bound)
}
