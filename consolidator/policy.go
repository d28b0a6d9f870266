package consolidator

import (
	"fmt"
	"math"
	"time"

	"github.com/troupe-run/troupe/memory"
	pmem "github.com/troupe-run/troupe/pipelines/memory"
)

// Policy says what the planner forgets, merges, promotes, distils and invalidates. A
// zero field takes its default (see DefaultPolicy); a negative threshold turns its
// rule off.
type Policy struct {
	// MinImportance: a memory less important than this and older than its tier's
	// MaxAge is forgotten. Default 0.2; negative: no forgetting by importance and age.
	MinImportance float64
	// MaxAge is, per tier, the age past which a memory less important than
	// MinImportance is forgotten; a tier missing from the map has no age limit. Age
	// counts from the memory's Timestamp (its Created time when that is zero). Nil:
	// working 24h, episodic 30d, perceptual 30d, semantic none.
	MaxAge map[memory.Tier]time.Duration
	// Capacity is, per tier, how many valid memories the tier keeps: past it, the
	// least valuable are forgotten. A tier missing from the map (or 0) is unbounded.
	// Nil: working 50.
	Capacity map[memory.Tier]int
	// DuplicateThreshold: two memories of a tier (and modality) whose vectors have at
	// least this cosine, calibrated from the floor of the tier's cosines (their
	// median shrunk toward a prior of 0.5: see the package documentation), are
	// merged. Default 0.92; negative: hash dedupe only.
	DuplicateThreshold float64
	// PromoteAbove: a working memory more important than this is promoted to
	// episodic. Default 0.7; negative: no promotion.
	PromoteAbove float64
	// ClusterThreshold: episodic memories within this cosine (calibrated, as
	// DuplicateThreshold's) of a cluster's seed join its cluster, a candidate for
	// distillation into a semantic fact. Default 0.8; negative: no distillation.
	ClusterThreshold float64
	// MinCluster and MaxCluster bound a distillation cluster's size (default 3 and 20).
	MinCluster, MaxCluster int
	// ConflictThreshold: two valid semantic memories at least this close (and below
	// DuplicateThreshold), in cosine calibrated as DuplicateThreshold's, are a
	// candidate conflict for the model to judge. Default 0.75; negative: only
	// functional relations are checked.
	ConflictThreshold float64
	// MaxJudgements bounds the candidate conflicts planned per run, closest first
	// (default 20).
	MaxJudgements int
	// FunctionalRelations are the relation types a subject has one value of at a
	// time: a newer fact giving another value invalidates the older one. Types are
	// compared in lower case with spaces as underscores. Nil: DefaultFunctional.
	FunctionalRelations []string
}

// DefaultFunctional lists the relation types treated as functional when
// Policy.FunctionalRelations is nil: a person lives in one place, works at one
// employer, has one age and one name at a time; "is" covers role and state facts
// ("alice is CTO") as the extractor writes them.
var DefaultFunctional = []string{"lives_in", "works_at", "is", "age", "name"}

// DefaultPolicy returns the policy with every default filled in.
func DefaultPolicy() Policy { return Policy{}.withDefaults() }

const day = 24 * time.Hour

func (p Policy) withDefaults() Policy {
	if p.MinImportance == 0 {
		p.MinImportance = 0.2
	}
	if p.MaxAge == nil {
		p.MaxAge = map[memory.Tier]time.Duration{memory.Working: day, memory.Episodic: 30 * day, memory.Perceptual: 30 * day}
	}
	if p.Capacity == nil {
		p.Capacity = map[memory.Tier]int{memory.Working: 50}
	}
	if p.DuplicateThreshold == 0 {
		p.DuplicateThreshold = 0.92
	}
	if p.PromoteAbove == 0 {
		p.PromoteAbove = 0.7
	}
	if p.ClusterThreshold == 0 {
		p.ClusterThreshold = 0.8
	}
	if p.MinCluster == 0 {
		p.MinCluster = 3
	}
	if p.MaxCluster == 0 {
		p.MaxCluster = 20
	}
	if p.ConflictThreshold == 0 {
		p.ConflictThreshold = 0.75
	}
	if p.MaxJudgements == 0 {
		p.MaxJudgements = 20
	}
	if p.FunctionalRelations == nil {
		p.FunctionalRelations = DefaultFunctional
	}
	return p
}

// Validate reports a policy the planner cannot follow (after defaults).
func (p Policy) Validate() error {
	p = p.withDefaults()
	for _, f := range []struct {
		name string
		v    float64
	}{{"MinImportance", p.MinImportance}, {"DuplicateThreshold", p.DuplicateThreshold},
		{"PromoteAbove", p.PromoteAbove}, {"ClusterThreshold", p.ClusterThreshold}, {"ConflictThreshold", p.ConflictThreshold}} {
		if math.IsNaN(f.v) || f.v > 1 {
			return fmt.Errorf("consolidator: policy %s %v: want a value up to 1 (negative turns the rule off)", f.name, f.v)
		}
	}
	if p.MinCluster < 2 || p.MaxCluster < p.MinCluster {
		return fmt.Errorf("consolidator: policy cluster size %d..%d: want 2 ≤ MinCluster ≤ MaxCluster", p.MinCluster, p.MaxCluster)
	}
	if p.MaxJudgements < 0 {
		return fmt.Errorf("consolidator: policy MaxJudgements %d is negative", p.MaxJudgements)
	}
	for t, d := range p.MaxAge {
		if _, err := memory.ParseTier(string(t)); err != nil {
			return fmt.Errorf("consolidator: policy MaxAge: %w", err)
		}
		if d < 0 {
			return fmt.Errorf("consolidator: policy MaxAge of %s is negative", t)
		}
	}
	for t, n := range p.Capacity {
		if _, err := memory.ParseTier(string(t)); err != nil {
			return fmt.Errorf("consolidator: policy Capacity: %w", err)
		}
		if n < 0 {
			return fmt.Errorf("consolidator: policy Capacity of %s is negative", t)
		}
	}
	return nil
}

// Recency is the recency factor of a memory age old: max(0.1, exp(−0.1 × age_hours /
// 24)), the design documents' episodic recency (about 10% less a day, floored at 0.1
// after about 23 days): pipelines/memory's Recency.
func Recency(age time.Duration) float64 { return pmem.Recency(age) }

// Value is what forgetting by capacity keeps the most of: importance × Recency(age).
func Value(importance float64, age time.Duration) float64 {
	return importance * Recency(age)
}
