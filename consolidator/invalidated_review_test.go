//go:build review

package consolidator_test

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
)

// A memory invalidated while a run planned to merge a duplicate into it is not
// merged into: the duplicate, still true, would go into a memory searches skip.
func TestRunDoesNotMergeIntoAMemoryInvalidatedMeanwhile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := openNamespace(t, "user:alice")
	keep, other := 0.6, 0.5
	res, err := ns.Add(ctx, "k1", []memory.AddRequest{
		{Tier: memory.Semantic, Content: "Alice lives in Lisbon", Importance: &keep},
		{Tier: memory.Semantic, Content: "Alice lives in Lisbon.", Importance: &other},
	})
	if err != nil {
		t.Fatal(err)
	}
	kept, dup := res[0].ID, res[1].ID
	target := &meanwhile{Namespace: ns, hook: func() {
		if err := ns.Invalidate(ctx, "user-edit", kept, "", "the user said it is wrong"); err != nil {
			t.Error(err)
		}
	}}
	c, err := consolidator.New(consolidator.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Run(ctx, target, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := ns.Get(dup); !ok || m.InvalidAt != nil {
		t.Errorf("the valid duplicate %s was merged into the memory invalidated meanwhile: %v\n%s", dup, ok, rep)
	}
}
