package memory_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/memory"
)

// A merge gives the kept memory the participants of the memories it absorbs,
// bounded as its metadata is: at most the bytes a write takes (MaxContentBytes),
// the kept memory's own first, then the most recent absorbed memory's. Before,
// they were unioned without bound: episodes of 200 participants each, merged,
// made one memory of 600, past what any write of it would be allowed, and every
// further merge (a dedupe of the consolidator) made it larger.
func TestMergeKeepsParticipantsWithinTheLimit(t *testing.T) {
	f := newFixture(t)
	ns := f.ns(t, "team:ops")
	ctx := testCtx(t)
	people := func(prefix string) []string { // 200 names of 50 bytes: 10,000 bytes
		out := make([]string, 200)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%03d-%s", prefix, i, strings.Repeat("x", 50-len(prefix)-5))
		}
		return out
	}
	day := time.Date(2024, 11, 1, 9, 0, 0, 0, time.UTC)
	res := add(t, ns, "",
		memory.AddRequest{Tier: memory.Episodic, Content: "The outage review of Monday", Participants: people("kept"), Timestamp: day},
		memory.AddRequest{Tier: memory.Episodic, Content: "The outage review, Monday", Participants: people("old"), Timestamp: day.Add(-48 * time.Hour)},
		memory.AddRequest{Tier: memory.Episodic, Content: "Monday's outage review", Participants: people("new"), Timestamp: day.Add(24 * time.Hour)})
	m, err := ns.Merge(ctx, "merge", res[0].ID, []string{res[1].ID, res[2].ID}, "alike")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range m.Participants {
		n += len(p)
	}
	if n > memory.DefaultMaxContentBytes {
		t.Errorf("merged participants of %d bytes (%d of them); the limit is %d", n, len(m.Participants), memory.DefaultMaxContentBytes)
	}
	if !slices.Equal(m.Participants[:200], people("kept")) {
		t.Errorf("the kept memory's own participants are not all first")
	}
	var newer, older int
	for _, p := range m.Participants[200:] {
		switch {
		case strings.HasPrefix(p, "new-"):
			newer++
		case strings.HasPrefix(p, "old-"):
			older++
		}
	}
	if newer == 0 || older != 0 {
		t.Errorf("of the absorbed memories' participants %d of the most recent and %d of the oldest were kept; want the most recent's first", newer, older)
	}
	// The merged memory stays one whose episode filter still finds it.
	got, err := ns.Search(ctx, memory.Query{Text: "outage review", Tiers: []memory.Tier{memory.Episodic}, Participants: []string{"kept-007-" + strings.Repeat("x", 41)}, Limit: 5})
	if err != nil || len(got) != 1 || got[0].Memory.ID != m.ID {
		t.Errorf("search by a kept participant: %v %v", got, err)
	}
}
