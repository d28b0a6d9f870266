package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A message's metadata carries its task's budget, as a task POSTed to /v1/tasks
// does: max_tokens, max_cost_usd and max_steps are the task.submitted's. A bad
// value is an invalid-params error (-32602) that names it, and starts no task.
func TestA2AMessageCarriesTheTaskBudget(t *testing.T) {
	n, url := a2aNode(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: "within budget"})})
	client, _ := a2aClient(t, url, a2a.CardPath)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for _, c := range []struct {
		metadata map[string]any
		want     string
	}{
		{map[string]any{"max_tokens": -5}, "max_tokens"},
		{map[string]any{"max_tokens": 1.5}, "max_tokens must be a whole number"},
		{map[string]any{"max_steps": "ten"}, "max_steps must be a whole number"},
		{map[string]any{"max_steps": 5000}, "max_steps"},
		{map[string]any{"max_cost_usd": "cheap"}, "max_cost_usd must be a number"},
		{map[string]any{"max_cost_usd": -1}, "max_cost_usd"},
	} {
		msg := userMessage("refused")
		msg.Metadata = c.metadata
		_, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: msg})
		if !errors.Is(err, sdk.ErrInvalidParams) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("metadata %v: %v, want an invalid-params error that says %q", c.metadata, err, c.want)
		}
		if events, err := n.Log().Read(ctx, a2a.ContextFor(msg.ID), 1); err != nil || len(events) != 0 {
			t.Errorf("metadata %v: the refused message's session has %d events, %v", c.metadata, len(events), err)
		}
	}

	msg := userMessage("spend little")
	msg.Metadata = map[string]any{"max_tokens": 1000, "max_cost_usd": 0.25, "max_steps": 3, "other": "kept out"}
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	if task.Status.State != sdk.TaskStateCompleted {
		t.Fatalf("the task: %s", task.Status.State)
	}
	events, err := n.Log().Read(ctx, task.ContextID, 1)
	if err != nil || len(events) == 0 {
		t.Fatalf("the task's session: %d events, %v", len(events), err)
	}
	p, err := events[0].Decode()
	if err != nil {
		t.Fatal(err)
	}
	ts, ok := p.(*messages.TaskSubmitted)
	if !ok || ts.MaxTokens != 1000 || ts.MaxCostUSD != 0.25 || ts.MaxSteps != 3 {
		t.Fatalf("task.submitted: %+v, want max_tokens 1000, max_cost_usd 0.25, max_steps 3", p)
	}
}
