package node_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// A Func tool's schema defaults are filled in where the tool is performed (its
// Parse), not in what the session records: tool.requested keeps the arguments as
// the model sent them, the tool reads the default, and replay verify decides the
// same call again from the recorded reply.
func TestToolDefaultsAreAppliedByThePerformerOnly(t *testing.T) {
	type repeatArgs struct {
		Word  string `json:"word"`
		Times int    `json:"times,omitempty" tool:"default=3"`
	}
	repeat := tools.MustFunc("repeat", "repeats a word", func(_ context.Context, a repeatArgs) (string, error) {
		return fmt.Sprintf("%s×%d", a.Word, a.Times), nil
	}, tools.WithSideEffects(false))
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "call_1", Name: "repeat", Arguments: `{"word": "ho"}`}}},
		{Content: "done"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{Model: model, Tools: []tools.Tool{repeat}, Agents: []node.NamedAgent{{Name: "repeater", Tools: []string{"repeat"}}}}
	n := nodetest.Start(t, cfg)
	if _, err := n.Submit(context.Background(), node.Task{Input: "say ho", SessionID: "tool-defaults", Agent: "repeater"}); err != nil {
		t.Fatal(err)
	}
	events := waitEnded(t, n, "tool-defaults")
	var requested, completed int
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *messages.ToolCallRequested:
			requested++
			if p.Arguments != `{"word": "ho"}` {
				t.Errorf("tool.requested records %s, want the model's arguments as sent", p.Arguments)
			}
		case *messages.ToolCallCompleted:
			completed++
			if p.Result != "ho×3" {
				t.Errorf("the tool's result %q, want ho×3 (the default read by the tool)", p.Result)
			}
		}
	}
	if requested != 1 || completed != 1 {
		t.Fatalf("%d tool.requested, %d tool.completed; want 1 each", requested, completed)
	}
	agents, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := actors.VerifyAmong(agents, events); err != nil || div != nil {
		t.Fatalf("replay verify: %v %v", div, err)
	}
}
