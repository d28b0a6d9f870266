package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A parent cancelled while its child runs: the child's task records what it spent
// (300 tokens) when it ends cancelled, after the parent's task.failed, whose
// sub_agents_usage misses it. Under decision rules 10 the child's end is then
// recorded on the parent's task (actors.LateAnswer): a tool.call.completed of the
// delegate call after the task.failed, whose usage is what the child spent, so
// that the parent's figures (its sub-agents' usage) hold the child's spend, and
// the parent's session still verifies.
func TestDelegateCancelledChildSpendIsInTheParentsFigures(t *testing.T) {
	model := heldHelperModel(t, map[string][]llm.ScriptStep{
		"lead": {{ToolCalls: delegateCall("d1", "helper", "6*7").ToolCalls, Usage: promptTokens(100)}, {Content: "done"}},
	})
	n := nodetest.Start(t, subagentsConfig(model))
	if _, err := n.Submit(context.Background(), node.Task{Input: "go", SessionID: "boss", Agent: "lead", MaxTokens: 5000}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the child's second call", func() bool { return model.callsOf("helper") >= 2 })
	if err := n.Cancel(context.Background(), "boss", "enough"); err != nil {
		t.Fatal(err)
	}
	var f []*messages.TaskFailed
	waitFor(t, 10*time.Second, "the child's end", func() bool {
		f = payloads[*messages.TaskFailed](t, readAll(t, n.Log(), "boss.sub4"))
		return len(f) > 0
	})
	var boss []messages.Envelope
	waitFor(t, 10*time.Second, "the child's end recorded on its parent's task", func() bool {
		boss = readAll(t, n.Log(), "boss")
		return boss[len(boss)-1].Type == messages.TypeToolCallCompleted
	})
	spent := f[0].Usage.Add(f[0].SubAgentsUsage)
	late := boss[len(boss)-1]
	c := payloads[*messages.ToolCallCompleted](t, boss[len(boss)-1:])[0]
	if c.Usage != spent || c.Error == "" || late.CorrelationID != boss[0].ID {
		t.Errorf("the late answer: %s (task %s), want the child's spend %+v on the parent's task %s", late.Payload, late.CorrelationID, spent, boss[0].ID)
	}
	st := actors.NewSessionState("boss")
	for _, e := range boss {
		if err := st.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	pf := payloads[*messages.TaskFailed](t, boss)
	if got := st.TaskSubAgentsUsage(boss[0].ID); got != spent || !pf[0].SubAgentsUsage.IsZero() {
		t.Errorf("the child spent %+v before it was cancelled; the parent's task counts %+v of its sub-agents' (its task.failed %+v)", spent, got, pf[0].SubAgentsUsage)
	}
	if status, _, _ := st.Status(); status != messages.StatusFailed || st.StatusReason() != messages.ReasonCancelled {
		t.Errorf("the parent's status is %q (%s), want failed, cancelled", status, st.StatusReason())
	}
	agents, err := subagentsConfig(model).AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := actors.VerifyAmong(agents, boss); err != nil || div != nil {
		t.Fatalf("replay verify of the parent: %v %v", div, err)
	}
}

// heldHelperModel is a model by agent whose "helper" asks the calculator for 6*7
// (300 prompt tokens), then holds its answer (300 more) until the test ends; the
// other agents answer their scripts (their first steps delegating to it).
func heldHelperModel(t *testing.T, others map[string][]llm.ScriptStep) *byAgent {
	t.Helper()
	held := make(chan struct{})
	t.Cleanup(func() { close(held) })
	scripts := map[string][]llm.ScriptStep{
		"helper": {
			{ToolCalls: []messages.ToolCall{{ID: "h1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}, Usage: promptTokens(300)},
			{Content: "42", Usage: promptTokens(300)},
		},
	}
	for agent, steps := range others {
		scripts[agent] = steps
	}
	model := newByAgent(t, scripts)
	model.hold = func(agent string, step int) <-chan struct{} {
		if agent == "helper" && step == 2 {
			return held
		}
		return nil
	}
	return model
}
