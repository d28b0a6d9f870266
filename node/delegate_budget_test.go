package node_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// promptTokens is a usage of n prompt tokens.
func promptTokens(n int) messages.Usage { return messages.Usage{PromptTokens: n} }

// childTask returns the task.submitted of a parent's delegate call's child.
func childTask(t *testing.T, n *node.Node, childID string) (*messages.TaskSubmitted, []messages.Envelope) {
	t.Helper()
	events := readAll(t, n.Log(), childID)
	tasks := payloads[*messages.TaskSubmitted](t, events)
	if len(tasks) != 1 {
		t.Fatalf("child %s has %d tasks", childID, len(tasks))
	}
	return tasks[0], events
}

// A task's token budget covers its sub-agents. Each child starts with what the
// parent has left (and no more than its own agent's budget); what it spends is
// recorded on the delegate call's tool.completed and counts against the parent's
// budget: the second child has only 200 tokens, stops at its first step, and its
// 300 tokens put the parent over its 1,000, which stops before another model call
// (a task of decision rules 10; rules 11 start a call alone so too:
// TestDelegateCallAloneStartsPastTheBudgetsFloor).
func TestDelegateChildrenSpendTheParentsBudget(t *testing.T) {
	lead := func(s llm.ScriptStep) llm.ScriptStep { s.Usage = promptTokens(100); return s }
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead": {lead(delegateCall("d1", "helper", "What is 6*7?")), lead(delegateCall("d2", "helper", "And 7*8?")),
			lead(llm.ScriptStep{Content: "never asked"})},
		"helper": {
			{ToolCalls: []messages.ToolCall{{ID: "h1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}, Usage: promptTokens(300)},
			{Content: "42", Usage: promptTokens(300)},
		},
	})
	cfg := subagentsConfig(model)
	cfg.DecisionRules = 10 // rules 11 start it too: TestDelegateCallAloneStartsPastTheBudgetsFloor
	n := nodetest.Start(t, cfg)
	parent := runAgentTask(t, n, node.Task{Input: "Ask the helper twice.", SessionID: "spender", Agent: "lead", MaxTokens: 1000})

	var keys []messages.EffectKey
	var results []*messages.ToolCallCompleted
	for _, r := range payloads[*messages.ToolCallRequested](t, parent) {
		k, err := messages.ParseEffectKey(r.Key)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	results = payloads[*messages.ToolCallCompleted](t, parent)
	if len(keys) != 2 || len(results) != 2 {
		t.Fatalf("the parent made %d calls with %d results: %s", len(keys), len(results), typesOf(parent))
	}
	first, _ := childTask(t, n, node.ChildSessionID(keys[0]))
	second, secondEvents := childTask(t, n, node.ChildSessionID(keys[1]))
	// 1,000 less the parent's first step (100); then less its second step and the
	// first child's 600.
	if first.MaxTokens != 900 || second.MaxTokens != 200 {
		t.Fatalf("the children's budgets: %d and %d, want 900 and 200", first.MaxTokens, second.MaxTokens)
	}
	if results[0].Usage != promptTokens(600) || results[0].Result != "42" || results[1].Usage != promptTokens(300) ||
		!strings.Contains(results[1].Error, messages.ReasonTokenBudget) {
		t.Fatalf("the delegate calls' results: %+v %+v", results[0], results[1])
	}
	if f := payloads[*messages.TaskFailed](t, secondEvents); len(f) != 1 || f[0].Reason != messages.ReasonTokenBudget {
		t.Fatalf("the second child's end: %+v", f)
	}
	last := parent[len(parent)-1]
	if last.Type != messages.TypeTaskFailed {
		t.Fatalf("the parent ended with %s: %s", last.Type, typesOf(parent))
	}
	f := payloads[*messages.TaskFailed](t, parent)[0]
	if f.Reason != messages.ReasonTokenBudget || f.Usage != promptTokens(200) || f.SubAgentsUsage != promptTokens(900) ||
		!strings.Contains(f.Error, "used 1100 tokens (200 prompt + 0 completion of its own, 900 by its sub-agents)") {
		t.Fatalf("the parent's end: %+v", f)
	}
	if c := model.callsOf("lead"); c != 2 {
		t.Errorf("the lead's model was called %d times, want 2 (none past the budget)", c)
	}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	for _, events := range [][]messages.Envelope{parent, readAll(t, n.Log(), node.ChildSessionID(keys[0])), secondEvents} {
		if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
			t.Errorf("verify %s: %+v %v", events[0].SessionID, div, err)
		}
	}
}

// Delegate calls of one reply run side by side: they share what the parent has
// left equally. A child's own agent's smaller budget still holds, and a parent
// with no budget leaves its children to their agents' own.
func TestDelegateCallsOfOneReplyShareTheBudget(t *testing.T) {
	two := llm.ScriptStep{Usage: promptTokens(100)}
	for i, agent := range []string{"helper", "thrifty"} {
		args, _ := json.Marshal(map[string]string{"agent": agent, "task": "compute"})
		two.ToolCalls = append(two.ToolCalls, messages.ToolCall{ID: "d" + string(rune('1'+i)), Name: node.DelegateTool, Arguments: string(args)})
	}
	helper := []llm.ScriptStep{{Content: "42", Usage: promptTokens(50)}}
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead": {two, {Content: "both answered", Usage: promptTokens(100)}}, "helper": helper, "thrifty": helper,
	})
	n := nodetest.Start(t, subagentsConfig(model))
	for _, c := range []struct {
		session   string
		maxTokens int
		maxCost   float64
		want      [2]int
		wantCost  [2]float64
	}{
		// (2,000 - 100) / 2 = 950 each; thrifty's own budget is 10.
		{"shared", 2000, 0, [2]int{950, 10}, [2]float64{}},
		// No budget: the children's tasks set none, and run under their agents'
		// (thrifty's 10).
		{"unbounded", 0, 0, [2]int{0, 0}, [2]float64{}},
		// A cost budget is shared alike (no price table here: the calls cost 0).
		{"shared-cost", 0, 1.5, [2]int{0, 0}, [2]float64{0.75, 0.75}},
	} {
		parent := runAgentTask(t, n, node.Task{Input: "Ask both.", SessionID: c.session, Agent: "lead", MaxTokens: c.maxTokens, MaxCostUSD: c.maxCost})
		var got [2]int
		var gotCost [2]float64
		for i, r := range payloads[*messages.ToolCallRequested](t, parent) {
			k, err := messages.ParseEffectKey(r.Key)
			if err != nil {
				t.Fatal(err)
			}
			task, _ := childTask(t, n, node.ChildSessionID(k))
			got[i], gotCost[i] = task.MaxTokens, task.MaxCostUSD
		}
		if got != c.want || gotCost != c.wantCost {
			t.Errorf("%s: the children's budgets %v and $%v, want %v and $%v", c.session, got, gotCost, c.want, c.wantCost)
		}
	}
}

func typesOf(events []messages.Envelope) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString(string(e.Type) + " ")
	}
	return b.String()
}

// A team's fan-out runs its branches side by side: they share the team task's
// budget equally, and the aggregator after them gets what is left of it after
// what they spent.
func TestTeamFanOutBranchesShareTheBudget(t *testing.T) {
	file, err := nodeconfig.LoadAgents(filepath.Join("..", "examples", "teams.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{Model: llm.Offline{}, Agents: file.NodeAgents()})
	res, err := n.RunTask(context.Background(), node.Task{Input: "What is 12 * (7 + 5)?", SessionID: "panel-budget", Agent: "panel", MaxTokens: 10_000})
	if err != nil || res.Status != messages.StatusCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	events := readAll(t, n.Log(), "panel-budget")
	ids, calls := teamChildren(t, events)
	if got := strings.Join(calls, " "); got != "branch→calculator branch→checker aggregate→writer" {
		t.Fatalf("delegations %s", got)
	}
	var budgets []int
	spent := 0
	for i, id := range ids {
		task, child := childTask(t, n, id)
		budgets = append(budgets, task.MaxTokens)
		if i < 2 {
			for _, d := range payloads[*messages.TaskCompleted](t, child) {
				spent += d.Usage.Tokens() + d.SubAgentsUsage.Tokens()
			}
		}
	}
	if budgets[0] != 5000 || budgets[1] != 5000 || spent == 0 || budgets[2] != 10_000-spent {
		t.Fatalf("budgets %v (the branches spent %d), want 5000, 5000 and %d", budgets, spent, 10_000-spent)
	}
	done := payloads[*messages.TaskCompleted](t, events)
	if len(done) != 1 || done[0].SubAgentsUsage.Tokens() <= spent {
		t.Fatalf("the team's end %+v: its sub-agents' usage should count all three members", done)
	}
}
