package memory

import (
	"math"
	"testing"
	"time"
)

const eps = 1e-9

func near(t *testing.T, name string, got, want float64) {
	t.Helper()
	if math.IsNaN(got) || math.Abs(got-want) > eps {
		t.Errorf("%s = %.12g, want %.12g", name, got, want)
	}
}

func TestImportanceWeight(t *testing.T) {
	for _, c := range []struct {
		importance, want float64
	}{
		{0, 0.8},           // 0.8 + 0*0.4
		{0.25, 0.9},        // 0.8 + 0.1
		{0.5, 1.0},         // 0.8 + 0.2
		{1, 1.2},           // 0.8 + 0.4
		{-1, 0.8},          // clamped to 0
		{2, 1.2},           // clamped to 1
		{math.NaN(), 0.8},  // NaN counts as 0
		{math.Inf(1), 1.2}, // clamped to 1
	} {
		near(t, "ImportanceWeight", ImportanceWeight(c.importance), c.want)
	}
}

func TestWorkingTimeDecay(t *testing.T) {
	for _, c := range []struct {
		age  time.Duration
		want float64
	}{
		{0, 1},                                 // 0.95^0
		{-5 * time.Hour, 1},                    // negative age counts as 0
		{3 * time.Hour, 0.9746794344808963},    // 0.95^0.5 = sqrt(0.95)
		{6 * time.Hour, 0.95},                  // 0.95^1: 5% per six hours
		{12 * time.Hour, 0.9025},               // 0.95^2
		{264 * time.Hour, 0.10467395472325501}, // 0.95^44, just above the floor
		{270 * time.Hour, 0.1},                 // 0.95^45 = 0.0994 < 0.1: the floor (crossed at 6*ln0.1/ln0.95 = 269.34h)
		{10000 * time.Hour, 0.1},               // floor
		{time.Duration(math.MaxInt64), 0.1},    // floor, no overflow
		{time.Duration(math.MinInt64), 1},      // negative
	} {
		near(t, "WorkingTimeDecay("+c.age.String()+")", WorkingTimeDecay(c.age), c.want)
	}
}

func TestRecency(t *testing.T) {
	for _, c := range []struct {
		age  time.Duration
		want float64
	}{
		{0, 1},                                 // exp(0)
		{-time.Hour, 1},                        // negative age counts as 0
		{24 * time.Hour, 0.9048374180359595},   // exp(-0.1)
		{240 * time.Hour, 0.36787944117144233}, // exp(-1)
		{552 * time.Hour, 0.10025884372280375}, // exp(-2.3), just above the floor
		{553 * time.Hour, 0.1},                 // exp(-2.3042) < 0.1 (floor crossed at 240*ln10 = 552.62h)
		{time.Duration(math.MaxInt64), 0.1},    // floor
	} {
		near(t, "Recency("+c.age.String()+")", Recency(c.age), c.want)
	}
}

func TestHybrid(t *testing.T) {
	near(t, "vector and keyword", Hybrid(0.8, true, 0.5), 0.71)  // 0.56 + 0.15
	near(t, "keyword alone", Hybrid(0.8, false, 0.5), 0.5)       // no vector score: keyword
	near(t, "zero", Hybrid(0, true, 0), 0)                       //
	near(t, "ones", Hybrid(1, true, 1), 1)                       // 0.7 + 0.3
	near(t, "NaN vector", Hybrid(math.NaN(), true, 0.5), 0.15)   // 0*0.7 + 0.5*0.3
	near(t, "NaN keyword", Hybrid(0.5, false, math.NaN()), 0)    // NaN counts as 0
	near(t, "negative cosine", Hybrid(-0.4, true, 1), 0.3)       // clamped to 0
	near(t, "Inf", Hybrid(math.Inf(1), true, math.Inf(-1)), 0.7) // clamped to 1 and 0
}

func TestWorkingScore(t *testing.T) {
	for _, c := range []struct {
		name       string
		vector     float64
		hasVector  bool
		keyword    float64
		age        time.Duration
		importance float64
		want       float64
	}{
		// base 0.8*0.7 + 0.5*0.3 = 0.71, decay 0.95^(12/6) = 0.9025, weight 1.0 → 0.640775
		{"design example", 0.8, true, 0.5, 12 * time.Hour, 0.5, 0.640775},
		// base 0.5 (keyword only), decay 1, weight 1.2 → 0.6
		{"no vector, fresh, important", 0.9, false, 0.5, 0, 1, 0.6},
		// base 1, decay 0.95, weight 0.8 → 0.76
		{"unimportant", 1, true, 1, 6 * time.Hour, 0, 0.76},
		// base 0.71, decay floor 0.1, weight 1.2 → 0.0852
		{"ancient", 0.8, true, 0.5, 1000 * time.Hour, 1, 0.0852},
		// negative age counts as 0: 0.71 * 1 * 1
		{"negative age", 0.8, true, 0.5, -time.Hour, 0.5, 0.71},
		// NaN everywhere counts as 0: base 0, weight 0.8 → 0
		{"NaN", math.NaN(), true, math.NaN(), 0, math.NaN(), 0},
	} {
		near(t, c.name, WorkingScore(c.vector, c.hasVector, c.keyword, c.age, c.importance), c.want)
	}
}

func TestEpisodicAndPerceptualScore(t *testing.T) {
	for _, c := range []struct {
		name       string
		vector     float64
		age        time.Duration
		importance float64
		want       float64
	}{
		// (0.9*0.8 + exp(-0.1)*0.2) * 1.2 = (0.72 + 0.18096748) * 1.2 = 1.08116098
		{"a day old, important", 0.9, 24 * time.Hour, 1, 1.0811609803286302},
		// (0.5*0.8 + 1*0.2) * 0.8 = 0.6 * 0.8 = 0.48
		{"fresh, unimportant", 0.5, 0, 0, 0.48},
		// (0.3*0.8 + exp(-1)*0.2) * 0.9 = (0.24 + 0.07357589) * 0.9 = 0.28221830
		{"ten days old", 0.3, 240 * time.Hour, 0.25, 0.28221829941085963},
		// (0 + 0.1*0.2) * 1.0 = 0.02: the recency floor keeps it above 0
		{"irrelevant and ancient", 0, 100000 * time.Hour, 0.5, 0.02},
		// NaN vector counts as 0; negative age as 0: (0 + 0.2) * 0.8 = 0.16
		{"NaN", math.NaN(), -time.Hour, math.NaN(), 0.16},
	} {
		near(t, "EpisodicScore "+c.name, EpisodicScore(c.vector, c.age, c.importance), c.want)
		near(t, "PerceptualScore "+c.name, PerceptualScore(c.vector, c.age, c.importance), c.want)
	}
}

func TestSemanticScore(t *testing.T) {
	near(t, "mid", SemanticScore(0.6, 0.5, 0.5), 0.57)                                 // (0.42 + 0.15) * 1.0
	near(t, "max", SemanticScore(1, 1, 1), 1.2)                                        // (0.7 + 0.3) * 1.2
	near(t, "zero", SemanticScore(0, 0, 0), 0)                                         // 0 * 0.8
	near(t, "graph only", SemanticScore(0, 0.625, 0), 0.15)                            // (0 + 0.1875) * 0.8
	near(t, "NaN", SemanticScore(math.NaN(), math.NaN(), 1), 0)                        // NaN counts as 0
	near(t, "hybrid relevance", SemanticScore(Hybrid(0.8, true, 0.5), 0.5, 1), 0.7764) // (0.71*0.7 + 0.15) * 1.2 = 0.647 * 1.2
}

// No formula returns NaN or leaves [0, 1.2], whatever it is given.
func TestScoresNeverNaN(t *testing.T) {
	values := []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1, 0, 0.5, 1, 2, math.MaxFloat64, -math.MaxFloat64}
	ages := []time.Duration{math.MinInt64, -time.Hour, 0, time.Hour, 1000 * time.Hour, math.MaxInt64}
	check := func(name string, v float64) {
		t.Helper()
		if math.IsNaN(v) || v < 0 || v > 1.2+eps {
			t.Fatalf("%s = %v", name, v)
		}
	}
	for _, x := range values {
		check("ImportanceWeight", ImportanceWeight(x))
		for _, y := range values {
			check("Hybrid", Hybrid(x, true, y))
			check("Hybrid", Hybrid(x, false, y))
			for _, z := range values {
				check("SemanticScore", SemanticScore(x, y, z))
			}
			for _, age := range ages {
				check("EpisodicScore", EpisodicScore(x, age, y))
				check("PerceptualScore", PerceptualScore(x, age, y))
				for _, z := range values {
					check("WorkingScore", WorkingScore(x, true, y, age, z))
				}
			}
		}
	}
	for _, age := range ages {
		check("WorkingTimeDecay", WorkingTimeDecay(age))
		check("Recency", Recency(age))
	}
}
