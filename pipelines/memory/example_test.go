package memory_test

import (
	"fmt"
	"time"

	"github.com/troupe-run/troupe/pipelines/memory"
)

// A working-memory tier ranks its memories: the keyword index gives the keyword
// score, the caller supplies the vector score and the age, and WorkingScore combines
// them.
func Example() {
	type note struct {
		id, text   string
		age        time.Duration
		importance float64
		vector     float64 // cosine similarity to the query, from the vector store
	}
	notes := []note{
		{"m1", "The user prefers dark roast coffee", 2 * time.Hour, 0.5, 0.82},
		{"m2", "Coffee machine in the office is broken", 30 * time.Hour, 0.2, 0.64},
		{"m3", "The user's dog is called Rex", 1 * time.Hour, 0.9, 0.10},
	}
	ix := memory.NewKeywordIndex()
	for _, n := range notes {
		ix.Put(n.id, n.text)
	}
	keyword := map[string]float64{}
	for _, hit := range ix.Search("which coffee does the user prefer", 10, nil) {
		keyword[hit.ID] = hit.Score
	}
	var ranked []memory.Ranked
	for _, n := range notes {
		score := memory.WorkingScore(n.vector, true, keyword[n.id], n.age, n.importance)
		ranked = append(ranked, memory.Ranked{ID: n.id, Tier: "working", Score: score})
	}
	for _, r := range memory.Merge(2, ranked) {
		fmt.Printf("%s %.3f\n", r.ID, r.Score)
	}
	// Output:
	// m1 0.859
	// m2 0.360
}

func ExampleExtractEntities() {
	entities, relations := memory.ExtractEntities("Alice works at Acme Corp. She lives in Berlin.")
	fmt.Println(entities)
	fmt.Println(relations)
	// Output:
	// [alice acme corp berlin]
	// [{alice works_at acme corp}]
}

func ExampleGraph_Score() {
	g := memory.NewGraph()
	g.Put("m1", nil, []memory.Relation{{From: "alice", Type: "works_at", To: "acme"}})
	g.Put("m2", []string{"acme"}, []memory.Relation{{From: "acme", Type: "based_in", To: "berlin"}})
	g.Put("m3", []string{"berlin"}, nil)
	for _, id := range []string{"m1", "m2", "m3"} {
		fmt.Println(id, g.Score([]string{"Alice"}, id))
	}
	// Output:
	// m1 1
	// m2 0.5
	// m3 0.25
}
