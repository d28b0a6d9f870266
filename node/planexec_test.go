package node_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A plan_execute agent with an executor hands a step that has only a goal to it
// through the delegate tool: the executor works it in a child session of its own
// (its own loop and tools), whose answer is the step's result. The offline model
// plans a question as one such step when the planner has no calculator. Both
// sessions verify.
func TestPlanExecuteExecutorWorksAGoalStepInAChildSession(t *testing.T) {
	cfg := node.Config{Model: llm.Offline{}, Agents: []node.NamedAgent{
		{Name: "planner", Paradigm: node.ParadigmPlanExecute, Tools: []string{node.DelegateTool},
			PlanExecute: actors.PlanExecute{Executor: "helper"}},
		{Name: "helper", Description: "computes", Tools: []string{"calculator"}},
	}}
	n := nodetest.Start(t, cfg)
	parent := runAgentTask(t, n, node.Task{Input: "Please work out 6*7 for me", SessionID: "pe", Agent: "planner"})
	if last := parent[len(parent)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s %s", last.Type, last.Payload)
	}
	var step *messages.ToolCallRequested
	for _, r := range payloads[*messages.ToolCallRequested](t, parent) {
		if r.Purpose == actors.PurposeStep {
			step = r
		}
	}
	if step == nil || step.Tool != node.DelegateTool || step.CallID != "s1" || !strings.Contains(step.Arguments, `"agent":"helper"`) {
		t.Fatalf("the step's call: %+v", step)
	}
	key, err := messages.ParseEffectKey(step.Key)
	if err != nil {
		t.Fatal(err)
	}
	child := readAll(t, n.Log(), node.ChildSessionID(key))
	if ended := payloads[*messages.TaskCompleted](t, child); len(ended) != 1 || ended[0].Output != "42" {
		t.Fatalf("the executor's session: %+v", ended)
	}
	if got := payloads[*messages.TaskCompleted](t, parent)[0].Output; got != "42" {
		t.Fatalf("the answer: %q", got)
	}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	for _, events := range [][]messages.Envelope{parent, child} {
		if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
			t.Errorf("verify %s: %+v %v", events[0].SessionID, div, err)
		}
	}
}
