package consolidator_test

import (
	"context"
	"testing"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// distilledFromE is episodes() with the fact f distilled from e1, e2 and e3.
func distilledFromE() []memory.Memory {
	f := mem("f", memory.Semantic, 0.6, 0)
	f.Sources = []messages.MemorySource{{Kind: "memory", ID: "e1"}, {Kind: "memory", ID: "e2"}, {Kind: "memory", ID: "e3"}}
	return append(episodes(), f)
}

// A cluster distilled already is not distilled again once one of its episodes was
// merged into a duplicate (the memory it went into keeps it as a source): before,
// the cluster {e2, e3, e5} was not covered by the fact's sources {e1, e2, e3}, and
// every such merge had the model asked again and a second fact written, or a fact
// its user let go written again.
func TestPlanDoesNotDistilAgainAClusterOneOfWhoseEpisodesWasMerged(t *testing.T) {
	mems := distilledFromE()
	e5 := mems[0] // e1 merged into e5, a more important duplicate
	e5.ID, e5.Importance = "e5", 0.7
	e5.Sources = []messages.MemorySource{{Kind: "memory", ID: "e1"}}
	mems[0] = e5
	check(t, consolidator.Plan(now, mems, only(consolidator.Policy{ClusterThreshold: 0.8})), nil)
}

// The same in one plan: e1 merged by rule 2 into its duplicate e5, the cluster of e5
// is the one f was distilled from.
func TestPlanDoesNotDistilAgainAClusterOneOfWhoseEpisodesItMerges(t *testing.T) {
	mems := distilledFromE()
	e5 := mems[0]
	e5.ID, e5.Importance = "e5", 0.7
	mems = append(mems, e5)
	got := consolidator.Plan(now, mems, only(consolidator.Policy{DuplicateThreshold: 0.92, ClusterThreshold: 0.8}))
	check(t, got, []consolidator.Decision{{Kind: consolidator.Merge, Into: "e5", IDs: []string{"e1"}, Reason: got[0].Reason}})
}

// A fact its user forgot is not distilled again from its cluster after one of the
// cluster's episodes was merged into a duplicate.
func TestRunDoesNotBringBackAForgottenFactAfterAMerge(t *testing.T) {
	mems := distilledFromE()[:4]
	e5 := mems[0]
	e5.ID, e5.Importance = "e5", 0.7
	e5.Sources = []messages.MemorySource{{Kind: "memory", ID: "e1"}}
	mems[0] = e5
	f := &forgetting{fakeTarget: newFake(mems...), letGo: [][]string{{"e1", "e2", "e3"}}}
	model := scripted(t, `{"fact": "a fact", "importance": 0.7}`)
	rep, err := newConsolidator(t, model, only(consolidator.Policy{ClusterThreshold: 0.8})).Run(context.Background(), f, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if len(model.reqs) != 0 || rep.Distilled != 0 {
		t.Fatalf("the model was asked %d times; report:\n%s", len(model.reqs), rep)
	}
}

type forgetting struct {
	*fakeTarget
	letGo [][]string
}

func (f *forgetting) ForgottenSources() [][]string { return f.letGo }
