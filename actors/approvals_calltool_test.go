package actors_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// A tool that needs approval needs it however the model calls it: through call_tool
// (the search disclosure's), which names it in its arguments, the call waits for an
// approval as a direct call does, and runs only once approved.
func TestApprovalHoldsThroughCallTool(t *testing.T) {
	model := script(t, calls(messages.ToolCall{ID: "c1", Name: actors.ToolCallTool, Arguments: `{"name":"send","arguments":{"to":"bob"}}`}),
		llm.ScriptStep{Content: "done"})
	h := &approvalHarness{clock: &testClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}
	callTool := funcTool{name: actors.ToolCallTool, fn: func(_ context.Context, c tools.Call) (string, error) {
		nc, err := tools.ParseNamedCall(actors.ToolCallTool, c.Arguments)
		if err != nil {
			return "", err
		}
		if nc.Name == "send" {
			h.sends.Add(1)
		}
		return "sent", nil
	}}
	h.harness = newHarness(t, harnessOpts{model: model, tools: []tools.Tool{funcTool{name: "send"}, callTool}, deps: func(d *actors.SessionDeps) {
		d.Agent.Approvals = map[string]bool{"send": true}
		d.Clock = h.clock
	}})
	h.submit("ap-indirect", "t1", "send it")
	events := h.waitEvent("ap-indirect", messages.TypeApprovalRequested, 1)
	req := firstOf[*messages.ApprovalRequested](t, events, messages.TypeApprovalRequested)
	if req.CallID != "c1" {
		t.Fatalf("approval requested: %+v", req)
	}
	if n := h.sends.Load(); n != 0 {
		t.Fatalf("send ran %d times through call_tool before it was approved", n)
	}
	if _, err := h.resolve("ap-indirect", "c1", true, "fine"); err != nil {
		t.Fatal(err)
	}
	events = h.wait("ap-indirect")
	if events[len(events)-1].Type != messages.TypeTaskCompleted || h.sends.Load() != 1 {
		t.Fatalf("send ran %d times; events: %s", h.sends.Load(), types(events))
	}
	reg, err := tools.NewRegistry(funcTool{name: "send"}, funcTool{name: actors.ToolCallTool})
	if err != nil {
		t.Fatal(err)
	}
	agent := actors.Agent{Model: model.Name(), SystemPrompt: "test", Tools: reg.Specs(), Approvals: map[string]bool{"send": true}}
	verifyDeterministic(t, agent, events)
	// Under rules 4 the call ran without approval: the recording diverges at the
	// request, which that task did not make.
	if div := underOlderRules(t, agent, events, 4); div == nil || !strings.Contains(div.Expected, string(messages.TypeApprovalRequested)) {
		t.Fatalf("relabelled to rules 4: %+v, want a divergence at the approval request", div)
	}
}

// A chain whose steps call a tool that needs approval needs it too: the chain's
// call waits for an approval before any step runs, and runs once approved.
func TestApprovalHoldsForAChainThatCallsTheTool(t *testing.T) {
	rec := &recorder{}
	list, withChain := chainAgent(t, rec.tool())
	model := script(t, calls(messages.ToolCall{ID: "c1", Name: "two_steps", Arguments: `{"x":"hello"}`}), llm.ScriptStep{Content: "done"})
	h := &approvalHarness{clock: &testClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}
	h.harness = newHarness(t, harnessOpts{model: model, tools: list, deps: func(d *actors.SessionDeps) {
		withChain(d)
		d.Agent.Approvals = map[string]bool{"rec": true}
		d.Clock = h.clock
	}})
	h.submit("ap-chain", "t1", "go")
	events := h.waitEvent("ap-chain", messages.TypeApprovalRequested, 1)
	if req := firstOf[*messages.ApprovalRequested](t, events, messages.TypeApprovalRequested); req.CallID != "c1" || req.Tool != "two_steps" {
		t.Fatalf("approval requested: %+v", req)
	}
	if got := rec.seen(); len(got) != 0 {
		t.Fatalf("the chain's steps ran before the approval: %v", got)
	}
	if _, err := h.resolve("ap-chain", "c1", true, "fine"); err != nil {
		t.Fatal(err)
	}
	events = h.wait("ap-chain")
	if events[len(events)-1].Type != messages.TypeTaskCompleted || len(rec.seen()) != 2 {
		t.Fatalf("steps run %v; events: %s", rec.seen(), types(events))
	}
}
