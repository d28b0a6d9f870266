package consolidator

import (
	"fmt"
	"math"
	"strings"

	"github.com/troupe-run/troupe/memory"
)

// The pairwise rules compare a calibrated cosine with their thresholds, not the raw
// one. A sentence embedding model compresses its cosines into a narrow band: with
// multilingual-e5-small unrelated texts score about 0.7–0.8, different facts about
// one thing ("Carl enjoys tea" / "… coffee", "allergic to peanuts" / "… cats",
// Lisbon / Porto) 0.93–0.95, and only rephrasings of one fact 0.985 and more. On
// the raw cosine a duplicate threshold of 0.92 merged different facts into one (the
// others then found by no search). As memory search does (memory.Calibrated), a
// cosine is rescaled from the floor of the set compared, (cos − floor) / (1 −
// floor): 0.945 over a floor of 0.7 is 0.82, a rephrasing's 0.99 is 0.97.
//
// The floor is the least cosine among pairs of the set (a tier and modality), shrunk
// toward 0 when the pairs are few (memory.Floor, with n the number of pairs): a
// least of many pairs stands for what unrelated memories score with this embedder,
// one of a few pairs (a tier of three memories, all about one thing) is weak
// evidence of it. Pairs rather than memories are counted because each pair is one
// observation of the embedder's floor and the rule takes their least; with few
// memories both counts are alike (two memories, one pair: the floor is an eleventh
// of their cosine, and a pair at 0.93 or more merges as before). The floor is at
// least 0: an embedder whose unrelated texts are about orthogonal (some pair at 0 or
// below) has nothing to undo, and its decisions and reasons are exactly those of the
// raw cosine. A tier whose memories are all about one thing has a high floor: a
// rephrasing at 0.985 merges while the floor is at most 0.81, past it the two are
// kept. That errs the safe way: a duplicate kept costs a search result, two facts
// merged lose one of them.

// floorPeers is how many memories after it (in the set's order) each memory is
// compared with for the floor: every pair of a set of up to floorPeers+1 memories,
// a number linear in the set's size beyond.
const floorPeers = 16

// scale is the calibration of one set's cosines.
type scale struct{ floor float64 }

// scaleOf is the calibration of items (of one modality, in a fixed order): the
// floor of the cosines of each with the next floorPeers. It stops early (floor 0)
// when the plan's context is done.
func (pl *planner) scaleOf(items []*item) scale {
	least, n := 0.0, 0
	for i, a := range items {
		for _, b := range items[i+1 : min(len(items), i+1+floorPeers)] {
			if !pl.tick(1) {
				return scale{}
			}
			if c, ok := pl.cos(a, b); ok && !math.IsNaN(c) && !math.IsInf(c, 0) {
				if n == 0 || c < least {
					least = c
				}
				n++
			}
		}
	}
	return scale{floor: max(0, memory.Floor(least, n))}
}

// of is cosine c calibrated.
func (s scale) of(c float64) float64 {
	if s.floor == 0 {
		return c
	}
	return memory.Calibrated(c, s.floor)
}

// raw is the raw cosine whose calibration is t (t ≤ 1): the threshold of the
// searches for pairs (near).
func (s scale) raw(t float64) float64 { return s.floor + t*(1-s.floor) }

// reason says what was compared for a reason: "cosine 0.97 ≥ 0.92" or, over a
// floor, "cosine 0.97 (0.91 calibrated over the tier's floor 0.66) ≥ 0.92", the raw cosines
// first and then their calibration.
func (s scale) reason(cos []float64, thr float64) string {
	raw := make([]string, len(cos))
	cal := make([]string, len(cos))
	var t string
	for i, c := range cos {
		raw[i] = num(c, 2)
		cal[i], t = atLeast(s.of(c), thr)
	}
	if len(cos) == 0 {
		_, t = atLeast(0, thr)
	}
	if s.floor == 0 {
		return fmt.Sprintf("cosine %s ≥ %s", strings.Join(cal, ", "), t)
	}
	return fmt.Sprintf("cosine %s (%s calibrated over the tier's floor %s) ≥ %s",
		strings.Join(raw, ", "), strings.Join(cal, ", "), num(s.floor, 2), t)
}
