package memory

import (
	"math"
	"slices"
	"strings"
)

// DefaultRRFK is the reciprocal rank fusion constant RRF uses when given k <= 0.
const DefaultRRFK = 60

// RRF fuses ranked lists of IDs (each best first) by reciprocal rank fusion: an ID
// scores the sum over the lists that hold it of 1/(k + rank), rank counting from 1.
// An ID repeated within one list counts at its first rank only. The result is best
// first, ties by ID ascending; Score and Raw both hold the fused score.
func RRF(k int, lists ...[]string) []Scored {
	if k <= 0 {
		k = DefaultRRFK
	}
	fused := map[string]float64{}
	var order []string // first appearance, so the sums below run in a fixed order
	for _, list := range lists {
		seen := make(map[string]bool, len(list))
		for i, id := range list {
			if seen[id] {
				continue
			}
			seen[id] = true
			if _, ok := fused[id]; !ok {
				order = append(order, id)
			}
			fused[id] += 1 / float64(k+i+1)
		}
	}
	out := make([]Scored, 0, len(order))
	for _, id := range order {
		out = append(out, Scored{ID: id, Score: fused[id], Raw: fused[id]})
	}
	slices.SortFunc(out, byScore)
	return out
}

// Ranked is a memory found by one tier, with the score that tier gave it.
type Ranked struct {
	ID    string
	Tier  string
	Score float64
}

// Merge merges the tiers' ranked lists into one, best score first, ties by ID and
// then by tier. An ID found in several lists appears once, with its best score (and
// on equal scores, the tier that sorts first). A NaN score counts as 0. limit <= 0
// returns every ID.
func Merge(limit int, lists ...[]Ranked) []Ranked {
	best := map[string]Ranked{}
	for _, list := range lists {
		for _, r := range list {
			if math.IsNaN(r.Score) {
				r.Score = 0
			}
			cur, ok := best[r.ID]
			if !ok || compareRanked(r, cur) < 0 {
				best[r.ID] = r
			}
		}
	}
	out := make([]Ranked, 0, len(best))
	for _, r := range best {
		out = append(out, r)
	}
	slices.SortFunc(out, compareRanked)
	if limit > 0 && len(out) > limit {
		out = slices.Clip(out[:limit])
	}
	return out
}

// compareRanked orders by score, best first, then by ID, then by tier.
func compareRanked(x, y Ranked) int {
	switch {
	case x.Score > y.Score:
		return -1
	case x.Score < y.Score:
		return 1
	}
	if c := strings.Compare(x.ID, y.ID); c != 0 {
		return c
	}
	return strings.Compare(x.Tier, y.Tier)
}
