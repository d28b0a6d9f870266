package memory

import (
	"math"
	"time"
)

// The weights of the design documents' formulas.
const (
	hybridVectorWeight  = 0.7 // share of the vector score in Hybrid and WorkingScore
	hybridKeywordWeight = 0.3 // share of the keyword score

	recallVectorWeight  = 0.8 // share of relevance in EpisodicScore and PerceptualScore
	recallRecencyWeight = 0.2 // share of Recency

	semanticVectorWeight = 0.7 // share of relevance in SemanticScore
	semanticGraphWeight  = 0.3 // share of the graph score

	// DecayFloor is the least WorkingTimeDecay and Recency ever return: an old
	// memory fades but never vanishes from ranking on age alone.
	DecayFloor = 0.1
)

// unit makes a score input safe: NaN counts as 0 and the value is clamped to [0,1]
// (so +Inf counts as 1 and a negative cosine as 0). No formula here returns NaN.
func unit(x float64) float64 {
	switch {
	case math.IsNaN(x) || x <= 0:
		return 0
	case x >= 1:
		return 1
	}
	return x
}

// hours is the age in hours; ages below 0 count as 0.
func hours(age time.Duration) float64 {
	if age <= 0 {
		return 0
	}
	return age.Hours()
}

// ImportanceWeight is 0.8 + importance*0.4: a memory of importance 0 weighs 0.8,
// of importance 0.5 weighs 1 and of importance 1 weighs 1.2. Importance is clamped to
// [0,1]; NaN counts as 0.
func ImportanceWeight(importance float64) float64 {
	return 0.8 + unit(importance)*0.4
}

// WorkingTimeDecay is max(0.1, 0.95^(age_hours/6)): a working memory loses 5% of its
// weight every six hours, down to the floor of 0.1.
func WorkingTimeDecay(age time.Duration) float64 {
	return math.Max(DecayFloor, math.Pow(0.95, hours(age)/6))
}

// Hybrid is the relevance of a memory found by hybrid search: vector*0.7 +
// keyword*0.3 when there is a vector score, the keyword score alone when there is not.
// The episodic, semantic and perceptual formulas take it as their "vector" term in
// hybrid mode. Inputs are clamped to [0,1]; NaN counts as 0.
func Hybrid(vector float64, hasVector bool, keyword float64) float64 {
	if !hasVector {
		return unit(keyword)
	}
	return unit(vector)*hybridVectorWeight + unit(keyword)*hybridKeywordWeight
}

// WorkingScore ranks a working memory: Hybrid(vector, hasVector, keyword) *
// WorkingTimeDecay(age) * ImportanceWeight(importance).
func WorkingScore(vector float64, hasVector bool, keyword float64, age time.Duration, importance float64) float64 {
	return Hybrid(vector, hasVector, keyword) * WorkingTimeDecay(age) * ImportanceWeight(importance)
}

// Recency is max(0.1, exp(-0.1 * age_hours / 24)): about 10% less per day, down to
// the floor of 0.1 (reached after about 23 days).
func Recency(age time.Duration) float64 {
	return math.Max(DecayFloor, math.Exp(-0.1*hours(age)/24))
}

// EpisodicScore ranks an episodic memory: (vector*0.8 + Recency(age)*0.2) *
// ImportanceWeight(importance).
func EpisodicScore(vector float64, age time.Duration, importance float64) float64 {
	return (unit(vector)*recallVectorWeight + Recency(age)*recallRecencyWeight) * ImportanceWeight(importance)
}

// SemanticScore ranks a semantic memory: (vector*0.7 + graph*0.3) *
// ImportanceWeight(importance), graph being Graph.Score.
func SemanticScore(vector, graph, importance float64) float64 {
	return (unit(vector)*semanticVectorWeight + unit(graph)*semanticGraphWeight) * ImportanceWeight(importance)
}

// PerceptualScore ranks a perceptual memory (an image, audio, a file): the same
// formula as EpisodicScore, (vector*0.8 + Recency(age)*0.2) * ImportanceWeight.
func PerceptualScore(vector float64, age time.Duration, importance float64) float64 {
	return (unit(vector)*recallVectorWeight + Recency(age)*recallRecencyWeight) * ImportanceWeight(importance)
}
