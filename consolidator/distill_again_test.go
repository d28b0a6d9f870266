package consolidator_test

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
)

// A distilled fact the user forgot stays forgotten: the next run does not distil
// its cluster again (a model call, and the same fact back at every run).
func TestRunDoesNotDistilAgainAFactTheUserForgot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := openNamespace(t, "user:alice")
	if _, err := ns.Add(ctx, "k1", []memory.AddRequest{
		{Tier: memory.Episodic, Content: "Alice had her morning meeting with Bob at nine on Monday"},
		{Tier: memory.Episodic, Content: "Alice had her morning meeting with Bob at nine on Tuesday"},
		{Tier: memory.Episodic, Content: "Alice had her morning meeting with Bob at nine on Wednesday"},
	}); err != nil {
		t.Fatal(err)
	}
	answer := "```json\n{\"fact\": \"Alice hates Bob.\", \"importance\": 0.8}\n```"
	model := scripted(t, answer, answer)
	c, err := consolidator.New(consolidator.Config{Model: model, Policy: only(consolidator.Policy{ClusterThreshold: 0.5})})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Run(ctx, ns, "run1")
	if err != nil || rep.Distilled != 1 {
		t.Fatalf("first run: err %v\n%s", err, rep)
	}
	fact := rep.Decisions[0].Into
	if err := ns.Forget(ctx, "user-forget", []string{fact}, "wrong: Alice likes Bob"); err != nil {
		t.Fatal(err)
	}
	rep, err = c.Run(ctx, ns, "run2")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Distilled != 0 || len(model.reqs) != 1 {
		t.Errorf("the forgotten fact came back: %d model calls\n%s", len(model.reqs), rep)
	}
}
