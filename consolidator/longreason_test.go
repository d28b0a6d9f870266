package consolidator_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
)

// A model that judges a conflict with a reason of a megabyte (a runaway answer)
// still has its verdict applied, but what the invalidation records of its reason is
// bounded: the reason lands in the namespace's event, read by every fold of the
// namespace and by every look at the memory's history, and a model writing without
// end must not grow those by a megabyte a judgement.
func TestRunBoundsAModelsRunawayJudgementReason(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := openNamespace(t, "user:alice")
	res, err := ns.Add(ctx, "k1", []memory.AddRequest{
		{Tier: memory.Semantic, Content: "Alice's favourite colour is blue.", Timestamp: time.Now().Add(-48 * time.Hour)},
	})
	if err != nil {
		t.Fatal(err)
	}
	older := res[0].ID
	if _, err := ns.Add(ctx, "k2", []memory.AddRequest{{Tier: memory.Semantic, Content: "Alice's favourite colour is green."}}); err != nil {
		t.Fatal(err)
	}
	runaway := strings.Repeat("because colours change é ", 1<<20/len("because colours change é "))
	model := scripted(t, `{"contradicts": true, "reason": "`+runaway+`"}`)
	c, err := consolidator.New(consolidator.Config{Model: model, Policy: consolidator.Policy{ConflictThreshold: 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Run(ctx, ns, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Invalidated != 1 {
		t.Fatalf("the verdict was not applied:\n%.2000s", rep)
	}
	if n := len(rep.Decisions[0].Reason); n > 4<<10 {
		t.Errorf("the report holds a reason of %d bytes", n)
	}
	hist, err := ns.History(ctx, older)
	if err != nil {
		t.Fatal(err)
	}
	last := hist[len(hist)-1]
	if last.Memory == nil || last.Memory.InvalidAt == nil {
		t.Fatalf("the last change of %s is %+v, want its invalidation", older, last)
	}
	if n := len(last.Reason); n > 4<<10 {
		t.Errorf("the invalidation records a reason of %d bytes", n)
	}
	if !utf8.ValidString(last.Reason) || !strings.Contains(last.Reason, "judged contradicts it by scripted: because colours change") {
		t.Errorf("reason %.200q", last.Reason)
	}
}
