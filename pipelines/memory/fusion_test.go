package memory

import (
	"math"
	"slices"
	"testing"
)

func TestRRF(t *testing.T) {
	// k = 60: a 1/61; b 1/62 + 1/62 = 0.0322581; c 1/63 + 1/61 = 124/3843 = 0.0322664
	got := RRF(0, []string{"a", "b", "c"}, []string{"c", "b"})
	want := []struct {
		id    string
		score float64
	}{{"c", 1.0/63 + 1.0/61}, {"b", 2.0 / 62}, {"a", 1.0 / 61}}
	if len(got) != len(want) {
		t.Fatalf("RRF = %+v", got)
	}
	for i, w := range want {
		if got[i].ID != w.id || got[i].Raw != got[i].Score {
			t.Fatalf("RRF = %+v, want order c b a", got)
		}
		near(t, "RRF "+w.id, got[i].Score, w.score)
	}

	// k = 1: x 1/2 + 1/3, y 1/3 + 1/2: a tie, broken by ID. A repeat within a list
	// counts at its first position only: z is third in the first list, 1/(1+3).
	got = RRF(1, []string{"y", "x", "z", "y"}, []string{"x", "y"})
	if ids := scoredIDs(got); !slices.Equal(ids, []string{"x", "y", "z"}) {
		t.Errorf("RRF tie order = %v", ids)
	}
	near(t, "x", got[0].Score, 1.0/2+1.0/3)
	near(t, "z", got[2].Score, 1.0/4)

	if got := RRF(-5, []string{"a"}); got[0].Score != 1.0/61 {
		t.Errorf("k <= 0 should mean 60: %+v", got)
	}
	if got := RRF(60); len(got) != 0 {
		t.Errorf("no lists: %+v", got)
	}
}

func scoredIDs(s []Scored) []string {
	var out []string
	for _, x := range s {
		out = append(out, x.ID)
	}
	return out
}

func TestMerge(t *testing.T) {
	working := []Ranked{{"a", "working", 0.9}, {"b", "working", 0.5}}
	episodic := []Ranked{{"b", "episodic", 0.7}, {"c", "episodic", 0.5}, {"x", "episodic", 0.5}}
	semantic := []Ranked{{"c", "semantic", 0.5}, {"d", "semantic", math.NaN()}}
	want := []Ranked{
		{"a", "working", 0.9},
		{"b", "episodic", 0.7}, // b keeps its best score
		{"c", "episodic", 0.5}, // equal scores in two tiers: the tier that sorts first
		{"x", "episodic", 0.5}, // ties by ID
		{"d", "semantic", 0},   // NaN counts as 0
	}
	if got := Merge(0, working, episodic, semantic); !slices.Equal(got, want) {
		t.Errorf("Merge = %v\nwant    %v", got, want)
	}
	if got := Merge(2, semantic, episodic, working); !slices.Equal(got, want[:2]) {
		t.Errorf("Merge(2) = %v, want %v", got, want[:2])
	}
	if got := Merge(-1); len(got) != 0 {
		t.Errorf("Merge() = %v", got)
	}
}
