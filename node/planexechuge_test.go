package node_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// hugePlanStep runs, on a node recording its tasks under decision rules pin (0:
// this build's), a plan_execute task of 250 KiB of "<" (6 bytes each as JSON)
// whose one step is delegated to its executor, and returns the node, the task's
// result, the step's call and the agents.
func hugePlanStep(t *testing.T, pin int) (*node.Node, messages.TaskResult, *messages.ToolCallCompleted, actors.Agents) {
	t.Helper()
	ok := llm.ScriptStep{Content: "summary"}
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"planner": {{Content: `{"steps": [{"id": "s1", "goal": "summarise the page"}]}`}, ok},
		"helper":  {ok, ok}, // a compression call may come first
	})
	cfg := node.Config{Model: model, DecisionRules: pin, Agents: []node.NamedAgent{
		{Name: "planner", Paradigm: node.ParadigmPlanExecute, Tools: []string{node.DelegateTool},
			PlanExecute: actors.PlanExecute{Executor: "helper"}},
		{Name: "helper", Tools: []string{}},
	}}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, cfg)
	res, err := n.RunTask(context.Background(), node.Task{Input: "Summarise this page: " + strings.Repeat("<", 250<<10), SessionID: "pe", Agent: "planner"})
	if err != nil {
		t.Fatal(err)
	}
	var step *messages.ToolCallCompleted
	for _, c := range payloads[*messages.ToolCallCompleted](t, readAll(t, n.Log(), "pe")) {
		if c.CallID == "s1" {
			step = c
		}
	}
	if step == nil {
		t.Fatalf("no answer of the step's call; the task: %s %s %.300s", res.Status, res.Reason, res.Error)
	}
	return n, res, step, all
}

// From decision rules 14 a plan_execute step delegated to an agent gets its task
// within actors.MaxHandOverArguments (the delegate tool's bound), cut in its
// middle with a note: a task of 250 KiB of "<" completes, where under 13 the
// step's call was 1.5 MiB, which the delegate tool refused. Both sessions verify.
func TestPlanStepDelegatedWithinTheBound(t *testing.T) {
	n, res, step, all := hugePlanStep(t, 0)
	if res.Status != messages.StatusCompleted || res.Output != "summary" || step.Error != "" {
		t.Fatalf("status %s reason %s error %.300s; the step's error %.300s", res.Status, res.Reason, res.Error, step.Error)
	}
	parent := readAll(t, n.Log(), "pe")
	var call *messages.ToolCallRequested
	for _, r := range payloads[*messages.ToolCallRequested](t, parent) {
		if r.CallID == "s1" {
			call = r
		}
	}
	if call == nil || len(call.Arguments) > actors.MaxHandOverArguments || len(call.Arguments) < actors.MaxHandOverArguments-4<<10 {
		t.Fatalf("the step's call: %d bytes", len(call.Arguments))
	}
	key, err := messages.ParseEffectKey(call.Key)
	if err != nil {
		t.Fatal(err)
	}
	task, _ := childTask(t, n, node.ChildSessionID(key))
	if !strings.HasPrefix(task.Input, "summarise the page\n\n(This is step s1 of a plan for the task: Summarise this page: <<") ||
		!strings.Contains(task.Input, " bytes of the step's task cut here: a hand-over carries at most 1048576 bytes]\n") {
		t.Errorf("the executor's task: %.200q", task.Input)
	}
	for _, events := range [][]messages.Envelope{parent, readAll(t, n.Log(), node.ChildSessionID(key))} {
		if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
			t.Errorf("verify %s: %+v %v", events[0].SessionID, div, err)
		}
	}
}

// A plan_execute task recorded under decision rules 13 delegates its step as it
// did: whole, past the delegate tool's bound, which refuses it.
func TestPlanStepDelegationUnderRules13AsBefore(t *testing.T) {
	n, res, step, all := hugePlanStep(t, 13)
	if res.Status != messages.StatusFailed || !strings.Contains(step.Error, "invalid arguments: the arguments are") {
		t.Fatalf("status %s reason %s; the step's error %.300s", res.Status, res.Reason, step.Error)
	}
	if div, err := actors.VerifyAmong(all, readAll(t, n.Log(), "pe")); err != nil || div != nil {
		t.Errorf("verify: %+v %v", div, err)
	}
}
