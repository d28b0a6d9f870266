package consolidator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
)

// embedded gives each memory the offline hashing embedder's vector of its content,
// as a node without an embedder configured stores it.
func embedded(t *testing.T, mems []memory.Memory) []memory.Memory {
	t.Helper()
	texts := make([]string, len(mems))
	for i, m := range mems {
		texts[i] = m.Content
	}
	vs, err := llm.HashingEmbedder{}.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range mems {
		mems[i].Vector = vs[i]
	}
	return mems
}

// A fact and its negation are two facts, the newer often the correction of the
// older: with the offline hashing embedder (the node's default) a semantic tier of
// a few dozen facts has a floor of about 0, and "Alice told us … that she is not
// allergic to peanuts and shellfish" (cosine 0.95 with "… she is allergic …") was
// merged into the older fact, the correction then found by no search. Such a pair
// is not merged and goes to the conflict judgement instead; two texts that negate
// alike, in other words ("isn't", "is not"), merge as before.
// others are facts about other things, each in words of its own.
var others = []string{
	"Bob drives a red Toyota", "The team meets every Monday morning", "Carol prefers green tea",
	"The office moved to the harbour district", "Dave plays the cello in an orchestra",
	"Eve studies marine biology", "The printer on floor three jams often", "Frank collects vintage stamps",
	"Grace runs marathons in autumn", "The cafeteria serves soup on Fridays", "Heidi speaks fluent Japanese",
	"Ivan repairs old bicycles", "Judy writes mystery novels", "The garden needs watering daily",
	"Mallory invests in solar farms", "Niaj teaches chemistry at night school", "Olivia bakes sourdough bread",
	"Peggy sails a small yacht", "The server room is kept cold", "Rupert knits woollen scarves",
	"Sybil paints watercolour landscapes", "Trent climbs granite cliffs", "Victor brews craft beer",
	"Walter grows chili peppers", "The library closes early in winter", "Yolanda restores antique clocks",
}

func TestPlanDoesNotMergeAFactWithItsNegation(t *testing.T) {
	pairs := []textPair{
		{"Alice told us during the onboarding call that she is allergic to peanuts and shellfish",
			"Alice told us during the onboarding call that she is not allergic to peanuts and shellfish", false},
		{"The quarterly review meeting with the vendor from Porto was moved to Tuesday afternoon",
			"The quarterly review meeting with the vendor from Porto was never moved to Tuesday afternoon", false},
		{"During the support call on the new contract Alice said she wants the premium support plan",
			"During the support call on the new contract Alice said she doesn't want the premium support plan", false},
		{"During the support call on the new contract Alice said she wants the premium support plan",
			"During the support call on the new contract Alice said she wants no premium support plan", false},
		{"During the support call on the new contract Alice said she isn’t happy with the premium support plan",
			"During the support call on the new contract Alice said she isn't happy with the premium support plan", true},
		{"Alice told us during the onboarding call that she is allergic to peanuts and shellfish",
			"Alice told us during the onboarding call that she is allergic to peanuts and shellfish!", true},
	}
	checkAmongOthers(t, pairs)
}

// textPair is two memories' texts and whether Plan should merge them.
type textPair struct {
	a, b  string
	merge bool
}

// checkMerges plans each pair alone, a's and b's vectors close (cosine 0.99), and
// reports a pair merged, or not, against its merge.
func checkMerges(t *testing.T, pairs []textPair) {
	t.Helper()
	for _, p := range pairs {
		a := withVector(mem("a", memory.Semantic, 0.5, 3*24*time.Hour), 1, 0, 0)
		a.Content = p.a
		b := withVector(mem("b", memory.Semantic, 0.5, 2*24*time.Hour), 0.99, 0.1, 0)
		b.Content = p.b
		got := consolidator.Plan(now, []memory.Memory{a, b}, only(consolidator.Policy{DuplicateThreshold: 0.92}))
		if merged := len(got) == 1 && got[0].Kind == consolidator.Merge; merged != p.merge {
			t.Errorf("%q and %q: %+v, want merged %v", p.a, p.b, got, p.merge)
		}
	}
}

// checkAmongOthers plans each pair among others, embedded by the offline
// embedder, and reports a pair merged, or not, against its merge; a pair kept
// apart must then be one for the model to judge as a conflict.
func checkAmongOthers(t *testing.T, pairs []textPair) {
	t.Helper()
	for _, p := range pairs {
		var mems []memory.Memory
		for i, s := range others {
			m := mem(fmt.Sprintf("o%02d", i), memory.Semantic, 0.5, 10*24*time.Hour)
			m.Content = s
			mems = append(mems, m)
		}
		a := mem("a", memory.Semantic, 0.5, 3*24*time.Hour)
		a.Content = p.a
		b := mem("b", memory.Semantic, 0.5, 2*24*time.Hour)
		b.Content = p.b
		mems = embedded(t, append(mems, a, b))
		got := consolidator.Plan(now, mems, only(consolidator.Policy{DuplicateThreshold: 0.92}))
		merged := false
		for _, d := range got {
			if d.Kind == consolidator.Merge && (d.Into == "a" || d.Into == "b") {
				merged = true
			}
		}
		if merged != p.merge {
			t.Errorf("%q and %q: %v, want merged %v", p.a, p.b, got, p.merge)
		}
		if p.merge {
			continue
		}
		got = consolidator.Plan(now, mems, only(consolidator.Policy{DuplicateThreshold: 0.92, ConflictThreshold: 0.75}))
		judged := false
		for _, d := range got {
			if d.Kind == consolidator.Invalidate && d.Judge && d.IDs[0] == "a" && d.By == "b" {
				judged = true
			}
		}
		if !judged {
			t.Errorf("%q and %q with conflicts judged: %v, want the pair for the model to judge", p.a, p.b, got)
		}
	}
}
