package consolidator

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/troupe-run/troupe/memory"
)

// The pairwise rules compare a calibrated cosine with their thresholds, not the raw
// one. A sentence embedding model compresses its cosines into a narrow band: with
// multilingual-e5-small unrelated texts score about 0.75–0.85, different facts about
// one thing ("Carl enjoys tea" / "… coffee", "allergic to peanuts" / "… cats",
// Lisbon / Porto) 0.93–0.95, and only rephrasings of one fact 0.97 and more. On
// the raw cosine a duplicate threshold of 0.92 merged different facts into one (the
// others then found by no search). As memory search does (memory.Calibrated), a
// cosine is rescaled from the floor of the set compared, (cos − floor) / (1 −
// floor): 0.945 over a floor of 0.7 is 0.82, a rephrasing's 0.99 is 0.97.
//
// The duplicate rule (rule 2, the one that merges) takes its floor from the median
// of the set's pair cosines, shrunk toward a conservative prior when the pairs are
// few (dupScaleOf):
//
//	floor = (n · median + FloorPrior · priorFloor) / (n + FloorPrior)
//
// with n the pairs compared, memory.FloorPrior (10) the prior's weight in pairs and
// priorFloor 0.5. The median, not the least: one memory unrelated to all the others
// (another language, a garbage vector) is the least of every pair it is in, and a
// floor that was the least moved with it, so that adding or forgetting that one
// memory merged or kept apart two facts it has nothing to do with. A memory is in
// fewer than half the pairs of a set of five or more, so the median does not follow
// it. A prior, not 0: a tier of two to four memories has one to six pairs, weak
// evidence of the embedder's floor, and a floor shrunk toward 0 compared them about
// raw, so tea and coffee (0.945) merged; shrunk toward 0.5, a pair merges in such a
// tier from a raw cosine of about 0.96–0.97 (two memories: 0.963), so different
// facts stay apart and rephrasings (0.97 and more) still merge. The median of a tier whose
// memories are mostly rephrasings of one fact is high, and its rephrasings may then
// be kept: that errs the safe way, a duplicate kept costs a search result, two
// facts merged lose one of them. An embedder whose unrelated texts are about
// orthogonal has a median about 0 and a floor of 0.5 · 10 / (n + 10): its small
// tiers merge from about 0.95–0.96, its large ones about on the raw cosine.
//
// The conflict and clustering rules take the floor of their set as memory search
// does: the least cosine among its pairs, shrunk toward 0 when they are few
// (memory.Floor), at least 0; an embedder whose unrelated texts are about
// orthogonal (some pair at 0 or below) has nothing to undo there, and their
// decisions and reasons are exactly those of the raw cosine. The conflict rule
// asks rule 2's measure whether a pair is a duplicate (duplicateByRule2).

// priorFloor is the floor rule 2 assumes of an embedder before its pairs say
// otherwise: the median of a set's pair cosines is shrunk toward it as if it were
// memory.FloorPrior pairs more.
const priorFloor = 0.5

// floorPeers is how many memories after it (in the set's order) each memory is
// compared with for the floor: every pair of a set of up to floorPeers+1 memories,
// a number linear in the set's size beyond.
const floorPeers = 16

// scale is the calibration of one set's cosines. For rule 2's (dupScaleOf) it
// keeps what its floor was taken from, for the reasons: the median of the pairs'
// cosines, how many pairs, and the prior.
type scale struct {
	floor  float64
	median float64
	pairs  int
	prior  bool
}

// scaleOf is the calibration of items (of one modality, in a fixed order): the
// floor of the cosines of each with the next floorPeers. It stops early (floor 0)
// when the plan's context is done.
func (pl *planner) scaleOf(items []*item) scale {
	least, n := 0.0, 0
	if !pl.eachCosine(items, func(c float64) {
		if n == 0 || c < least {
			least = c
		}
		n++
	}) {
		return scale{}
	}
	return scale{floor: max(0, memory.Floor(least, n))}
}

// eachCosine calls f with each finite cosine of an item of items with one of the
// next floorPeers, in order, and reports false when the plan's context was done
// first.
func (pl *planner) eachCosine(items []*item, f func(c float64)) bool {
	for i, a := range items {
		for _, b := range items[i+1 : min(len(items), i+1+floorPeers)] {
			if !pl.tick(1) {
				return false
			}
			if c, ok := pl.cos(a, b); ok && !math.IsNaN(c) && !math.IsInf(c, 0) {
				f(c)
			}
		}
	}
	return true
}

// dupScaleOf is rule 2's calibration of items (of one modality, in a fixed
// order): the median of the cosines of each with the next floorPeers, shrunk toward
// priorFloor. It is a pure function of the items' vectors in that order, so a
// replayed plan decides alike. It stops early (floor 0) when the plan's context is
// done.
func (pl *planner) dupScaleOf(items []*item) scale {
	n := 0
	for i := range items {
		n += min(len(items)-i-1, floorPeers)
	}
	cos := make([]float64, 0, n)
	if !pl.eachCosine(items, func(c float64) { cos = append(cos, c) }) {
		return scale{}
	}
	return dupScale(cos)
}

// dupScale is the calibration of a set whose pair cosines are cos (reordered).
func dupScale(cos []float64) scale {
	n := len(cos)
	med := 0.0
	if n > 0 {
		slices.Sort(cos)
		med = cos[n/2]
		if n%2 == 0 {
			med = (cos[n/2-1] + cos[n/2]) / 2
		}
	}
	floor := (float64(n)*med + memory.FloorPrior*priorFloor) / float64(n+memory.FloorPrior)
	return scale{floor: max(0, floor), median: med, pairs: n, prior: true}
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
// first and then their calibration; rule 2's says what its floor was taken from,
// "cosine 0.99 (0.96 calibrated over the tier's floor 0.72, from the median 0.77 of
// its 45 pair cosines and the prior 0.5) ≥ 0.92".
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
	if s.prior {
		return fmt.Sprintf("cosine %s (%s calibrated over the tier's floor %s, from the median %s of its %d pair cosines and the prior %s) ≥ %s",
			strings.Join(raw, ", "), strings.Join(cal, ", "), num(s.floor, 2), num(s.median, 2), s.pairs, num(priorFloor, 2), t)
	}
	if s.floor == 0 {
		return fmt.Sprintf("cosine %s ≥ %s", strings.Join(cal, ", "), t)
	}
	return fmt.Sprintf("cosine %s (%s calibrated over the tier's floor %s) ≥ %s",
		strings.Join(raw, ", "), strings.Join(cal, ", "), num(s.floor, 2), t)
}
