package knowledge

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Fusion says how a hybrid search merges its lists.
type Fusion string

// The fusions.
const (
	// FusionConvex scores every candidate of every list by all of them: each
	// query's cosine similarity to the chunk and each query text's BM25 score,
	// each min-max normalised over the candidates, averaged per kind, and mixed as
	// Alpha × vector + (1 − Alpha) × BM25 (the default).
	FusionConvex Fusion = "convex"
	// FusionRRF is reciprocal rank fusion, k = 60: a chunk scores the sum over the
	// lists that rank it of 1/(60 + rank).
	FusionRRF Fusion = "rrf"
	// FusionWeightedRRF is reciprocal rank fusion with each BM25 vote weighted by
	// the share of the query the chunk matches (its BM25 score over the query's
	// weight, at most 1).
	FusionWeightedRRF Fusion = "wrrf"
)

// Defaults of the fusion.
const (
	DefaultFusion = FusionConvex
	// DefaultAlpha is the vector share of FusionConvex.
	DefaultAlpha = 0.5
	// DefaultHashingAlpha is the vector share of FusionConvex when both embedders
	// are lexical (llm.IsLexical: the offline llm.HashingEmbedder, bare or
	// wrapped): its vectors find the query's words, as
	// BM25 does but blurred by hash collisions, so that at 0.5 a passage sharing no
	// word with the query could rank first by collisions alone. On
	// testdata/quality-hard.json hybrid nDCG@10 is 0.744 at 0.5, below BM25 alone
	// (0.785), and 0.805 at 0.2 (TestRetrievalQualityHashing).
	DefaultHashingAlpha = 0.2
)

// ParseFusion reads a fusion; empty is "" (the knowledge base's default).
func ParseFusion(s string) (Fusion, error) {
	switch f := Fusion(strings.ToLower(strings.TrimSpace(s))); f {
	case "", FusionConvex, FusionRRF, FusionWeightedRRF:
		return f, nil
	case "weighted-rrf":
		return FusionWeightedRRF, nil
	}
	return "", fmt.Errorf("%w: fusion %q: want convex, rrf or wrrf", ErrInvalid, s)
}

// scoreNorm is how FusionConvex puts a list's scores on one scale.
type scoreNorm int

const (
	// normCoverage scores BM25 by the share of the query a chunk matches (its
	// score over KeywordIndex.QueryWeight, at most 1) and vectors by min-max (the
	// default).
	normCoverage scoreNorm = iota
	normMinMax             // (s − min)/(max − min) over the candidates
	normZ                  // (s − mean)/stddev over the candidates
	normNone               // as they are, NaN as 0: the cosines of a vector search
)

// candidateScores holds, for one list (a query vector or a query text), the score
// of each candidate chunk, by its index in the candidate set; NaN when the chunk
// cannot be scored by it (a chunk without a vector).
type candidateScores []float64

// normalise puts scores on one scale in place: what cannot be scored takes the
// lowest normalised score (0 for normNone). A list whose scores are all equal
// tells the candidates apart no more than a constant: min-max makes them 1 (the
// best there is, so a lone candidate scores above 0), z-score 0.
func (s candidateScores) normalise(n scoreNorm) {
	if n == normNone {
		for i, v := range s {
			if math.IsNaN(v) {
				s[i] = 0
			}
		}
		return
	}
	lo, hi, sum, cnt := math.Inf(1), math.Inf(-1), 0.0, 0
	for _, v := range s {
		if math.IsNaN(v) {
			continue
		}
		lo, hi, sum, cnt = min(lo, v), max(hi, v), sum+v, cnt+1
	}
	if cnt == 0 || hi == lo {
		for i, v := range s {
			s[i] = 0
			if n == normMinMax && !math.IsNaN(v) {
				s[i] = 1
			}
		}
		return
	}
	switch n {
	case normZ:
		mean := sum / float64(cnt)
		var ss float64
		for _, v := range s {
			if !math.IsNaN(v) {
				ss += (v - mean) * (v - mean)
			}
		}
		sd := math.Sqrt(ss / float64(cnt))
		low := (lo - mean) / sd
		for i, v := range s {
			if math.IsNaN(v) {
				s[i] = low
			} else {
				s[i] = (v - mean) / sd
			}
		}
	default:
		for i, v := range s {
			if math.IsNaN(v) {
				s[i] = 0
			} else {
				s[i] = (v - lo) / (hi - lo)
			}
		}
	}
}

// fuseConvex mixes the normalised lists of the candidates ids: the mean of the
// vector lists times alpha plus the mean of the BM25 lists times 1 − alpha (a kind
// without lists gives the other all the weight). Vector lists alone (a vector
// search) are not normalised: a hit's score is its cosine (the mean over the
// queries), which says how near it is, where min-max would give every search's
// best hit 1, a passage on Kafka for a query on cakes too. Best first, ties by ID.
func fuseConvex(ids []string, vec, kw []candidateScores, alpha float64, n scoreNorm) []fusedID {
	vecNorm, kwNorm := n, n
	if n == normCoverage {
		vecNorm, kwNorm = normMinMax, normCoverage
	}
	switch {
	case len(vec) == 0:
		alpha = 0
	case len(kw) == 0:
		alpha, vecNorm = 1, normNone
	}
	out := make([]fusedID, len(ids))
	for i, id := range ids {
		out[i].id = id
	}
	for _, group := range []struct {
		lists  []candidateScores
		weight float64
		norm   scoreNorm
	}{{vec, alpha, vecNorm}, {kw, 1 - alpha, kwNorm}} {
		for _, l := range group.lists {
			if group.norm != normCoverage { // coverage lists come normalised
				l.normalise(group.norm)
			}
			w := group.weight / float64(len(group.lists))
			for i, v := range l {
				out[i].score += w * v
			}
		}
	}
	sortFused(out)
	return out
}

// cosine is the cosine similarity of a and b, NaN when either is zero or their
// lengths differ.
func cosine(a, b []float32) float64 {
	if len(a) != len(b) || len(a) == 0 {
		return math.NaN()
	}
	var dot, na, nb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		dot, na, nb = dot+x*y, na+x*x, nb+y*y
	}
	if na == 0 || nb == 0 {
		return math.NaN()
	}
	return dot / math.Sqrt(na*nb)
}

// sortFused orders fused IDs best first, ties by ID.
func sortFused(out []fusedID) {
	slices.SortFunc(out, func(a, b fusedID) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return strings.Compare(a.id, b.id)
	})
}
