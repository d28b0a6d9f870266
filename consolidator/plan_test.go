package consolidator_test

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

var now = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

// mem is a memory of tier with importance, remembered age before now.
func mem(id string, tier memory.Tier, importance float64, age time.Duration) memory.Memory {
	at := now.Add(-age)
	return memory.Memory{ID: id, Namespace: "user:alice", Tier: tier, Modality: memory.Text, Content: "content of " + id,
		Importance: importance, Timestamp: at, Created: at, Updated: at}
}

func withVector(m memory.Memory, v ...float32) memory.Memory { m.Vector = v; return m }

// digitless is s with each digit spelt as a letter ('0' is 'a'): distinct contents
// without numbers, for memories that must merge by their vectors alone (contents
// that hold other numbers are other facts, never merged).
func digitless(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return 'a' + r - '0'
		}
		return r
	}, s)
}

func withHash(m memory.Memory, h string) memory.Memory { m.Hash = h; return m }

func withRelation(m memory.Memory, from, typ, to string) memory.Memory {
	m.Relations = append(m.Relations, messages.MemoryRelation{From: from, Type: typ, To: to})
	return m
}

const day = 24 * time.Hour

// only turns every rule off but those the test sets.
func only(p consolidator.Policy) consolidator.Policy {
	off := consolidator.Policy{MinImportance: -1, DuplicateThreshold: -1, PromoteAbove: -1, ClusterThreshold: -1,
		ConflictThreshold: -1, Capacity: map[memory.Tier]int{}, MaxAge: map[memory.Tier]time.Duration{}}
	if p.MinImportance != 0 {
		off.MinImportance, off.MaxAge = p.MinImportance, p.MaxAge
	}
	if p.Capacity != nil {
		off.Capacity = p.Capacity
	}
	if p.DuplicateThreshold != 0 {
		off.DuplicateThreshold = p.DuplicateThreshold
	}
	if p.PromoteAbove != 0 {
		off.PromoteAbove = p.PromoteAbove
	}
	if p.ClusterThreshold != 0 {
		off.ClusterThreshold = p.ClusterThreshold
	}
	if p.ConflictThreshold != 0 {
		off.ConflictThreshold = p.ConflictThreshold
	}
	return off
}

func check(t *testing.T, got, want []consolidator.Decision) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("plan:")
		for _, d := range got {
			t.Errorf("  got  %#v", d)
		}
		for _, d := range want {
			t.Errorf("  want %#v", d)
		}
	}
}

func TestPlanForgetsOldUnimportantMemoriesLeastValuableFirst(t *testing.T) {
	mems := []memory.Memory{
		mem("m_old", memory.Episodic, 0.12, 45*day),       // value 0.12 × 0.1 (floor) = 0.012
		mem("m_young", memory.Episodic, 0.12, 10*day),     // too young
		mem("m_important", memory.Episodic, 0.5, 100*day), // important enough
		mem("m_fact", memory.Semantic, 0.05, 400*day),     // semantic: no age limit by default
		mem("m_w", memory.Working, 0.05, 36*time.Hour),    // value 0.05 × exp(−0.15) = 0.043
		mem("m_a", memory.Episodic, 0.1, 40*day),          // value 0.1 × 0.1 = 0.01
		mem("m_b", memory.Episodic, 0.1, 60*day),          // value 0.01 too, but older: first
	}
	got := consolidator.Plan(now, mems, only(consolidator.Policy{MinImportance: 0.2, MaxAge: consolidator.DefaultPolicy().MaxAge}))
	check(t, got, []consolidator.Decision{
		{Kind: consolidator.Forget, IDs: []string{"m_b"}, Reason: "importance 0.1 < 0.2 and age 60d > 30d"},
		{Kind: consolidator.Forget, IDs: []string{"m_a"}, Reason: "importance 0.1 < 0.2 and age 40d > 30d"},
		{Kind: consolidator.Forget, IDs: []string{"m_old"}, Reason: "importance 0.12 < 0.2 and age 45d > 30d"},
		{Kind: consolidator.Forget, IDs: []string{"m_w"}, Reason: "importance 0.05 < 0.2 and age 1.5d > 1d"},
	})
}

func TestPlanReasonNeverReadsFalse(t *testing.T) {
	mems := []memory.Memory{mem("m_1", memory.Episodic, 0.199, 30*day+time.Hour)}
	got := consolidator.Plan(now, mems, only(consolidator.Policy{MinImportance: 0.2, MaxAge: map[memory.Tier]time.Duration{memory.Episodic: 30 * day}}))
	check(t, got, []consolidator.Decision{
		{Kind: consolidator.Forget, IDs: []string{"m_1"}, Reason: "importance 0.199 < 0.2 and age 30.04d > 30d"},
	})
}

func TestPlanForgetsPastCapacityLeastValuableFirst(t *testing.T) {
	mems := []memory.Memory{
		mem("w1", memory.Working, 0.3, 0),             // value 0.3
		mem("w2", memory.Working, 0.6, 0),             // value 0.6
		mem("w3", memory.Working, 0.5, 48*time.Hour),  // value 0.5 × 0.95^8 = 0.332
		mem("w4", memory.Working, 0.3, 24*time.Hour),  // value 0.3 × 0.95^4 = 0.244
		mem("e1", memory.Episodic, 0.01, 0),           // another tier
		mem("e2", memory.Episodic, 0.3, 24*time.Hour), // value 0.3 × exp(−0.1) = 0.271
		mem("e3", memory.Episodic, 0.5, 0),
	}
	got := consolidator.Plan(now, mems, only(consolidator.Policy{Capacity: map[memory.Tier]int{memory.Working: 2, memory.Episodic: 2}}))
	check(t, got, []consolidator.Decision{
		{Kind: consolidator.Forget, IDs: []string{"w4"}, Reason: "working holds 4 > capacity 2: value 0.244 (importance 0.3 × working decay 0.81) is among the 2 lowest"},
		{Kind: consolidator.Forget, IDs: []string{"w1"}, Reason: "working holds 4 > capacity 2: value 0.3 (importance 0.3 × working decay 1) is among the 2 lowest"},
		{Kind: consolidator.Forget, IDs: []string{"e1"}, Reason: "episodic holds 3 > capacity 2: value 0.01 (importance 0.01 × recency 1) is among the 1 lowest"},
	})
}

// TestPlanRanksWorkingMemoriesAsTheNamespaceEvicts: past its capacity, the working
// tier loses what the namespace's own eviction on write would take (importance ×
// the working tier's decay, 0.95^(hours/6)), not what episodic recency would: an
// important memory two days old goes before a fresh one of middling importance.
// Rule 4 ranked the working tier by episodic recency, exp(−0.1·days), and so
// forgot the fresh one, which a write past working_capacity would have kept.
func TestPlanRanksWorkingMemoriesAsTheNamespaceEvicts(t *testing.T) {
	mems := []memory.Memory{
		mem("old", memory.Working, 0.9, 48*time.Hour), // 0.9 × 0.95^8 = 0.597; × exp(−0.2) = 0.737
		mem("new", memory.Working, 0.65, 0),           // 0.65
	}
	got := consolidator.Plan(now, mems, only(consolidator.Policy{Capacity: map[memory.Tier]int{memory.Working: 1}}))
	check(t, got, []consolidator.Decision{
		{Kind: consolidator.Forget, IDs: []string{"old"}, Reason: "working holds 2 > capacity 1: value 0.597 (importance 0.9 × working decay 0.66) is among the 1 lowest"},
	})
}

func TestPlanMergesExactDuplicatesIntoTheMostImportantThenOldest(t *testing.T) {
	mems := []memory.Memory{
		withHash(mem("a", memory.Working, 0.5, 2*time.Hour), "h1"),
		withHash(mem("b", memory.Working, 0.5, 5*time.Hour), "h1"), // as important as a, older
		withHash(mem("c", memory.Working, 0.6, time.Hour), "h1"),   // the most important: kept
		withHash(mem("d", memory.Episodic, 0.5, time.Hour), "h1"),  // another tier: not a duplicate
		withHash(mem("e", memory.Working, 0.5, time.Hour), "h2"),
	}
	inv := withHash(mem("f", memory.Working, 0.9, time.Hour), "h1")
	inv.InvalidAt = &now // history: not merged
	mems = append(mems, inv)
	got := consolidator.Plan(now, mems, only(consolidator.Policy{}))
	check(t, got, []consolidator.Decision{
		{Kind: consolidator.Merge, Into: "c", IDs: []string{"b", "a"}, Reason: "same content hash as c"},
	})
}

func TestPlanMergesSemanticDuplicatesWithinATier(t *testing.T) {
	mems := []memory.Memory{
		withVector(mem("a", memory.Episodic, 0.5, 3*day), 1, 0, 0),
		withVector(mem("b", memory.Episodic, 0.5, 2*day), 0.97, 0.2431, 0), // cosine 0.97 with a; a is older: kept
		withVector(mem("c", memory.Episodic, 0.5, day), 0.9, 0.43589, 0),   // cosine 0.9 with a: kept apart
		withVector(mem("s", memory.Semantic, 0.5, day), 1, 0, 0),           // another tier
		withVector(mem("x", memory.Episodic, 0.5, day), 1, 0),              // another dimension
		// Unrelated to a, b and c (cosine 0), as with an embedder whose unrelated
		// texts are orthogonal: the median of the tier's 6 pair cosines is 0.45,
		// shrunk toward the prior 0.5 to a floor of 0.48.
		withVector(mem("u", memory.Episodic, 0.5, day), 0, 0, 1),
	}
	got := consolidator.Plan(now, mems, only(consolidator.Policy{DuplicateThreshold: 0.92}))
	check(t, got, []consolidator.Decision{
		{Kind: consolidator.Merge, Into: "a", IDs: []string{"b"}, Reason: "cosine 0.97 (0.94 calibrated over the tier's floor 0.48, from the median 0.45 of its 6 pair cosines and the prior 0.5) ≥ 0.92 with a"},
	})
}

func TestPlanPromotesImportantWorkingMemories(t *testing.T) {
	mems := []memory.Memory{
		mem("w1", memory.Working, 0.85, time.Hour),
		mem("w2", memory.Working, 0.7, time.Hour), // not above
		mem("w3", memory.Working, 0.71, time.Hour),
		mem("e1", memory.Episodic, 0.9, time.Hour),
	}
	got := consolidator.Plan(now, mems, only(consolidator.Policy{PromoteAbove: 0.7}))
	check(t, got, []consolidator.Decision{
		{Kind: consolidator.Promote, IDs: []string{"w1"}, To: memory.Episodic, Reason: "importance 0.85 > 0.7"},
		{Kind: consolidator.Promote, IDs: []string{"w3"}, To: memory.Episodic, Reason: "importance 0.71 > 0.7"},
	})
}

// episodes is a cluster (e1, e2, e3 around e1), a promoted working memory that joins
// nothing, and a stray episode.
func episodes() []memory.Memory {
	return []memory.Memory{
		withVector(mem("e1", memory.Episodic, 0.6, 3*day), 1, 0, 0),
		withVector(mem("e2", memory.Episodic, 0.4, 2*day), 0.9, 0.43589, 0), // cosine 0.9 with e1
		withVector(mem("e3", memory.Episodic, 0.5, day), 0.85, 0, 0.52678),  // cosine 0.85 with e1, 0.765 with e2
		withVector(mem("e4", memory.Episodic, 0.9, day), 0, 1, 0),           // cosine 0 with e1
	}
}

func TestPlanProposesClustersForDistillation(t *testing.T) {
	got := consolidator.Plan(now, episodes(), only(consolidator.Policy{ClusterThreshold: 0.8}))
	check(t, got, []consolidator.Decision{
		{Kind: consolidator.Distill, IDs: []string{"e1", "e2", "e3"}, Importance: 0.6,
			Reason: "3 episodic memories within cosine 0.85 ≥ 0.8 of e1, not yet distilled"},
	})

	// Promoted working memories count as episodic. The stray e4 stays in the tier:
	// its cosine 0 with the others makes the tier's floor 0 (cosines compared raw).
	mems := append(episodes()[:2], withVector(mem("w", memory.Working, 0.8, day), 0.85, 0, 0.52678), episodes()[3])
	got = consolidator.Plan(now, mems, only(consolidator.Policy{ClusterThreshold: 0.8, PromoteAbove: 0.7}))
	check(t, got, []consolidator.Decision{
		{Kind: consolidator.Promote, IDs: []string{"w"}, To: memory.Episodic, Reason: "importance 0.8 > 0.7"},
		{Kind: consolidator.Distill, IDs: []string{"e1", "e2", "w"}, Importance: 0.8,
			Reason: "3 episodic memories within cosine 0.85 ≥ 0.8 of e1, not yet distilled"},
	})
}

func TestPlanSkipsClustersAlreadyDistilled(t *testing.T) {
	fact := mem("s", memory.Semantic, 0.6, 0)
	fact.Sources = []messages.MemorySource{{Kind: "memory", ID: "e1"}, {Kind: "memory", ID: "e2"}, {Kind: "memory", ID: "e3"}}
	got := consolidator.Plan(now, append(episodes(), fact), only(consolidator.Policy{ClusterThreshold: 0.8}))
	check(t, got, nil)

	// A fact of part of the cluster does not cover it.
	fact.Sources = fact.Sources[:2]
	got = consolidator.Plan(now, append(episodes(), fact), only(consolidator.Policy{ClusterThreshold: 0.8}))
	if len(got) != 1 || got[0].Kind != consolidator.Distill {
		t.Fatalf("plan = %v, want the cluster distilled", got)
	}

	// Too small a cluster is none.
	got = consolidator.Plan(now, episodes(), only(consolidator.Policy{ClusterThreshold: 0.86}))
	check(t, got, nil)
}

func TestPlanInvalidatesFactsContradictedOnAFunctionalRelation(t *testing.T) {
	mems := []memory.Memory{
		withRelation(mem("s1", memory.Semantic, 0.5, 142*day), "alice", "lives_in", "paris"), // 2026-01-10
		withRelation(mem("s2", memory.Semantic, 0.5, 92*day), "Alice", "lives in", "Berlin"), // 2026-03-01: newer
		withRelation(mem("s3", memory.Semantic, 0.5, 100*day), "alice", "likes", "tea"),      // not functional
		withRelation(mem("s4", memory.Semantic, 0.5, 50*day), "alice", "likes", "coffee"),
		withRelation(mem("s5", memory.Semantic, 0.5, 100*day), "bob", "works_at", "Acme"), // the same value
		withRelation(mem("s6", memory.Semantic, 0.5, 50*day), "bob", "works_at", "acme"),
		withRelation(mem("e1", memory.Episodic, 0.5, 10*day), "alice", "lives_in", "rome"), // not a fact
	}
	got := consolidator.Plan(now, mems, only(consolidator.Policy{}))
	check(t, got, []consolidator.Decision{
		{Kind: consolidator.Invalidate, IDs: []string{"s1"}, By: "s2",
			Reason: "newer s2 (2026-03-01) says Alice lives_in Berlin, this (2026-01-10) says alice lives_in paris: lives_in is functional"},
	})

	// An invalid fact is history: nothing contradicts it again.
	mems[0].InvalidAt, mems[0].InvalidBy = &now, "s2"
	check(t, consolidator.Plan(now, mems, only(consolidator.Policy{})), nil)
}

func TestPlanProposesCloseFactsForTheModelToJudge(t *testing.T) {
	mems := []memory.Memory{
		withVector(mem("a", memory.Semantic, 0.5, 10*day), 1, 0, 0),
		withVector(mem("b", memory.Semantic, 0.5, 5*day), 0.8, 0.6, 0), // cosine 0.8 with a
		withVector(mem("c", memory.Semantic, 0.5, day), 0, 0, 1),       // far from both
	}
	got := consolidator.Plan(now, mems, only(consolidator.Policy{ConflictThreshold: 0.75}))
	check(t, got, []consolidator.Decision{
		{Kind: consolidator.Invalidate, IDs: []string{"a"}, By: "b", Judge: true, Reason: "cosine 0.8 ≥ 0.75 with newer b"},
	})
}

func TestPlanIsDeterministic(t *testing.T) {
	var mems []memory.Memory
	rng := rand.New(rand.NewPCG(1, 2))
	tiers := []memory.Tier{memory.Working, memory.Episodic, memory.Semantic}
	for i := range 200 {
		m := mem(string(rune('a'+i%26))+string(rune('a'+i/26)), tiers[i%3], float64(rng.IntN(100))/100, time.Duration(rng.IntN(60*24))*time.Hour)
		m.Hash = []string{"h1", "h2", ""}[rng.IntN(3)] + string(m.Tier)
		m = withVector(m, float32(rng.IntN(3)), float32(rng.IntN(3)), float32(rng.IntN(3)))
		if m.Tier == memory.Semantic {
			m = withRelation(m, []string{"alice", "bob"}[rng.IntN(2)], "lives_in", []string{"paris", "rome", "oslo"}[rng.IntN(3)])
		}
		mems = append(mems, m)
	}
	want := consolidator.Plan(now, mems, consolidator.DefaultPolicy())
	if len(want) == 0 {
		t.Fatal("no decisions")
	}
	for range 5 {
		rng.Shuffle(len(mems), func(i, j int) { mems[i], mems[j] = mems[j], mems[i] })
		check(t, consolidator.Plan(now, mems, consolidator.DefaultPolicy()), want)
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, p := range []consolidator.Policy{
		{DuplicateThreshold: 1.5},
		{MinCluster: 1},
		{MinCluster: 5, MaxCluster: 4},
		{Capacity: map[memory.Tier]int{"nope": 3}},
		{MaxAge: map[memory.Tier]time.Duration{memory.Working: -time.Hour}},
	} {
		if err := p.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", p)
		}
	}
	if err := consolidator.DefaultPolicy().Validate(); err != nil {
		t.Errorf("the default policy: %v", err)
	}
}

func TestRecency(t *testing.T) {
	for _, c := range []struct {
		age  time.Duration
		want float64
	}{{0, 1}, {24 * time.Hour, 0.9048374180359595}, {30 * day, 0.1}} {
		if got := consolidator.Recency(c.age); got != c.want {
			t.Errorf("Recency(%v) = %v, want %v", c.age, got, c.want)
		}
	}
}

func TestPlanDoesNotMergeFactsThatContradict(t *testing.T) {
	mems := []memory.Memory{
		withRelation(withVector(mem("s1", memory.Semantic, 0.5, 142*day), 1, 0), "alice", "lives_in", "paris"),
		withRelation(withVector(mem("s2", memory.Semantic, 0.5, 92*day), 1, 0), "alice", "lives_in", "berlin"),
	}
	got := consolidator.Plan(now, mems, only(consolidator.Policy{DuplicateThreshold: 0.92}))
	check(t, got, []consolidator.Decision{
		{Kind: consolidator.Invalidate, IDs: []string{"s1"}, By: "s2",
			Reason: "newer s2 (2026-03-01) says alice lives_in berlin, this (2026-01-10) says alice lives_in paris: lives_in is functional"},
	})
}

// A fact merged into another in the same plan still covers its cluster: the memory
// it is merged into keeps its sources. Before, the plan merged the fact away and then
// proposed its cluster for distillation again: one more model call, and one more fact
// that the next run merged in turn.
func TestPlanMergedFactStillCoversItsCluster(t *testing.T) {
	kept := withHash(mem("s0", memory.Semantic, 0.9, 0), "same")
	fact := withHash(mem("s1", memory.Semantic, 0.6, 0), "same")
	fact.Sources = []messages.MemorySource{{Kind: "memory", ID: "e1"}, {Kind: "memory", ID: "e2"}, {Kind: "memory", ID: "e3"}}
	got := consolidator.Plan(now, append(episodes(), kept, fact), only(consolidator.Policy{ClusterThreshold: 0.8}))
	check(t, got, []consolidator.Decision{
		{Kind: consolidator.Merge, Into: "s0", IDs: []string{"s1"}, Reason: "same content hash as s0"},
	})
}
