package memory

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// chain builds the graph alice — acme — berlin — germany, plus bob alone:
//
//	m1 {acme, alice}     alice works_at acme
//	m2 {acme, berlin}    acme based_in berlin
//	m3 {berlin, germany} berlin part_of germany
//	m4 {bob}
//	m5 {germany}
func chain() *Graph {
	g := NewGraph()
	g.Put("m1", []string{"Alice"}, []Relation{{"Alice", "works_at", "Acme"}})
	g.Put("m2", nil, []Relation{{"acme", "based_in", " Berlin "}})
	g.Put("m3", []string{"Berlin"}, []Relation{{"Berlin", "part_of", "Germany"}})
	g.Put("m4", []string{"Bob"}, nil)
	g.Put("m5", []string{"GERMANY"}, nil)
	return g
}

func TestGraphScoreByHand(t *testing.T) {
	g := chain()
	for _, c := range []struct {
		query []string
		id    string
		want  float64
	}{
		// One query entity: 1 direct, 0.5 one hop, 0.25 two hops, 0 beyond.
		{[]string{"alice"}, "m1", 1},    // mentions alice
		{[]string{"alice"}, "m2", 0.5},  // acme is one hop from alice
		{[]string{"alice"}, "m3", 0.25}, // berlin is two hops (alice–acme–berlin)
		{[]string{"alice"}, "m5", 0},    // germany is three hops
		{[]string{"alice"}, "m4", 0},    // bob is not connected
		// Two query entities: the mean of their contributions.
		{[]string{"alice", "bob"}, "m1", 0.5},   // (1 + 0) / 2
		{[]string{"alice", "bob"}, "m4", 0.5},   // (0 + 1) / 2
		{[]string{"alice", "bob"}, "m2", 0.25},  // (0.5 + 0) / 2
		{[]string{"alice", "bob"}, "m3", 0.125}, // (0.25 + 0) / 2
		// The nearest mention counts: for m3, germany is direct and alice two hops.
		{[]string{"Alice", "germany", "  ALICE "}, "m3", 0.625}, // (0.25 + 1) / 2, alice counted once
		{[]string{"alice", "germany"}, "m2", 0.5},               // (0.5 [acme] + 0.5 [berlin]) / 2
		{[]string{"alice", "germany"}, "m1", 0.625},             // (1 + 0.25 [germany–berlin–acme]) / 2
		{[]string{"alice", "germany"}, "m5", 0.5},               // (0 + 1) / 2
		// Nothing to score.
		{nil, "m1", 0},
		{[]string{" ", ""}, "m1", 0},
		{[]string{"alice"}, "unknown", 0},
		{[]string{"nobody"}, "m1", 0},
	} {
		near(t, "Score("+c.id+")", g.Score(c.query, c.id), c.want)
	}
}

func TestGraphCandidates(t *testing.T) {
	g := chain()
	for _, c := range []struct {
		query   []string
		maxHops int
		k       int
		want    []Scored
	}{
		{[]string{"alice"}, 0, 0, []Scored{{"m1", 1, 1}}},
		{[]string{"alice"}, -3, 0, []Scored{{"m1", 1, 1}}},
		{[]string{"alice"}, 1, 0, []Scored{{"m1", 1, 1}, {"m2", 0.5, 0.5}}},
		{[]string{"alice"}, 2, 0, []Scored{{"m1", 1, 1}, {"m2", 0.5, 0.5}, {"m3", 0.25, 0.25}}},
		{[]string{"alice"}, 9, 0, []Scored{{"m1", 1, 1}, {"m2", 0.5, 0.5}, {"m3", 0.25, 0.25}}}, // clamped to 2
		{[]string{"alice"}, 2, 2, []Scored{{"m1", 1, 1}, {"m2", 0.5, 0.5}}},
		// reached {alice, germany, acme, berlin}: m1 and m3 tie at 0.625 (by ID), m2 and m5 at 0.5
		{[]string{"alice", "germany"}, 1, 0, []Scored{{"m1", 0.625, 0.625}, {"m3", 0.625, 0.625}, {"m2", 0.5, 0.5}, {"m5", 0.5, 0.5}}},
		{[]string{"nobody"}, 2, 0, []Scored{}},
	} {
		got := g.Candidates(c.query, c.maxHops, c.k)
		if !slices.Equal(got, c.want) {
			t.Errorf("Candidates(%v, %d, %d) = %v, want %v", c.query, c.maxHops, c.k, got, c.want)
		}
	}
}

func TestGraphCounts(t *testing.T) {
	g := chain()
	// entities: alice acme berlin germany bob; relations 3; edges 3
	if g.Entities() != 5 || g.Relations() != 3 || g.Edges() != 3 {
		t.Errorf("Entities %d Relations %d Edges %d", g.Entities(), g.Relations(), g.Edges())
	}
	// Empty names and relations with an empty end are dropped; a self-relation adds
	// no edge; a memory with nothing left is not stored.
	g.Put("m6", []string{"", "  "}, []Relation{{"", "x", "y"}, {"zed", "is_a", "ZED"}})
	if g.Entities() != 6 || g.Relations() != 4 || g.Edges() != 3 {
		t.Errorf("Entities %d Relations %d Edges %d", g.Entities(), g.Relations(), g.Edges())
	}
	g.Put("m7", []string{" "}, nil)
	if _, ok := g.memories["m7"]; ok {
		t.Error("a memory without entities was stored")
	}
}

// Put replaces and Remove forgets without a trace, also when two memories state the
// same relation.
func TestGraphRemoveLeavesNoDebris(t *testing.T) {
	g := chain()
	g.Put("dup", nil, []Relation{{"alice", "works_at", "acme"}, {"alice", "works_at", "acme"}})
	if g.Relations() != 3 {
		t.Errorf("a relation stated twice counts %d relations, want 3", g.Relations())
	}
	g.Remove("m1") // dup still states alice works_at acme
	if g.Relations() != 3 || g.Edges() != 3 {
		t.Errorf("after removing one of two: Relations %d Edges %d", g.Relations(), g.Edges())
	}
	near(t, "Score via the remaining relation", g.Score([]string{"alice"}, "m2"), 0.5)
	g.Remove("dup")
	if g.Relations() != 2 || g.Edges() != 2 || g.Entities() != 4 { // alice gone
		t.Errorf("after removing both: Entities %d Relations %d Edges %d", g.Entities(), g.Relations(), g.Edges())
	}
	near(t, "Score without alice", g.Score([]string{"alice"}, "m2"), 0)

	g.Put("m2", []string{"carol"}, nil) // replaces m2's relation acme–berlin
	if g.Relations() != 1 || g.Edges() != 1 {
		t.Errorf("after replacing m2: Relations %d Edges %d", g.Relations(), g.Edges())
	}
	for _, id := range []string{"m2", "m3", "m4", "m5", "m3", "unknown"} {
		g.Remove(id)
	}
	if g.Entities() != 0 || g.Relations() != 0 || g.Edges() != 0 ||
		len(g.mentions) != 0 || len(g.adjacent) != 0 || len(g.relations) != 0 || len(g.memories) != 0 {
		t.Errorf("empty graph holds %d mentions, %d adjacency lists, %d relations, %d memories",
			len(g.mentions), len(g.adjacent), len(g.relations), len(g.memories))
	}
}

// TestGraphScorerMatchesScore: on a random graph, Scorer scores every memory as
// Score does, and Candidates returns the best k of the memories within its hops,
// scored by Score.
func TestGraphScorerMatchesScore(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ent := func() string { return fmt.Sprintf("e%d", r.IntN(30)) }
	g := NewGraph()
	var ids []string
	for i := range 80 {
		id := fmt.Sprintf("m%02d", i)
		ids = append(ids, id)
		var rels []Relation
		for range r.IntN(3) {
			rels = append(rels, Relation{ent(), "rel", ent()})
		}
		g.Put(id, []string{ent(), ent()}[:1+r.IntN(2)], rels)
	}
	for range 40 {
		q := []string{ent(), ent(), "unknown"}[:1+r.IntN(3)]
		score := g.Scorer(q)
		for _, id := range append(ids, "missing") {
			if got, want := score(id), g.Score(q, id); got != want {
				t.Fatalf("Scorer(%v)(%s) = %v, Score = %v", q, id, got, want)
			}
		}
		for hops := range MaxGraphHops + 1 {
			// Every memory within hops of a query entity, scored by Score.
			var all []Scored
			for _, id := range ids {
				m := g.memories[id]
				near := false
				for _, e := range q {
					if d := g.distance(NormalizeEntity(e), m.entities, hops); d >= 0 {
						near = true
					}
				}
				if near {
					s := g.Score(q, id)
					all = append(all, Scored{ID: id, Score: s, Raw: s})
				}
			}
			slices.SortFunc(all, byScore)
			for _, k := range []int{0, 1, 3, 10, 200} {
				want := all
				if k > 0 && len(want) > k {
					want = want[:k]
				}
				if got := g.Candidates(q, hops, k); !slices.Equal(got, want) {
					t.Fatalf("Candidates(%v, %d, %d) = %v, want %v", q, hops, k, got, want)
				}
			}
		}
	}
}
