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

// fanOutUnderBudget runs a parent with a token budget of 1000 whose one reply
// (100 tokens) delegates 64 calls to a leaf whose one model call is 500 tokens,
// on a node recording its tasks under decision rules pin (0: this build's). It
// returns the parent's events, the tokens the tree spent (the parent's own and
// its sub-agents'), and the token budgets of the children that started.
func fanOutUnderBudget(t *testing.T, pin int) (events []messages.Envelope, spent int, children []int) {
	t.Helper()
	wide := delegateCalls(64, "leaf")
	wide.Usage = promptTokens(100)
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead": {wide, {Content: "gathered", Usage: promptTokens(100)}},
		"leaf": {{Content: "ok", Usage: promptTokens(500)}},
	})
	cfg := subagentsConfig(model)
	cfg.DecisionRules = pin
	cfg.Agents = append(cfg.Agents, node.NamedAgent{Name: "leaf", SystemPrompt: "You answer."})
	n := nodetest.Start(t, cfg)
	events = runAgentTask(t, n, node.Task{Input: "fan out", SessionID: "wide", Agent: "lead", MaxTokens: 1000})
	for _, e := range payloads[*messages.ModelResponded](t, events) {
		spent += e.Usage.Tokens()
	}
	for _, c := range payloads[*messages.ToolCallCompleted](t, events) {
		spent += c.Usage.Tokens()
	}
	for _, r := range payloads[*messages.ToolCallRequested](t, events) {
		k, err := messages.ParseEffectKey(r.Key)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, n.Log(), node.ChildSessionID(k)); len(got) > 0 {
			task, _ := childTask(t, n, node.ChildSessionID(k))
			children = append(children, task.MaxTokens)
		}
	}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
		t.Errorf("verify the parent: %+v %v", div, err)
	}
	return events, spent, children
}

// From decision rules 11 delegate calls are admitted against what is left of
// their task's token budget: 900 tokens give one sub-agent the least one needs
// (actors.MinSubAgentTokens), so the first of the reply's 64 calls starts, with
// all 900, and the other 63 are error results the parent's model reads (they
// start no child); the tree spends within twice its budget, where each of 64
// children with 14 tokens made its 500-token call (32,100 tokens on 1000).
func TestDelegateFanOutIsAdmittedAgainstTheBudget(t *testing.T) {
	events, spent, children := fanOutUnderBudget(t, 0)
	if len(children) != 1 || children[0] != 900 {
		t.Fatalf("the children that started had budgets %v, want one of 900", children)
	}
	refused := 0
	for _, c := range payloads[*messages.ToolCallCompleted](t, events) {
		if strings.Contains(c.Error, "has 900 tokens left for the 64 sub-agents delegated at once, and a sub-agent needs at least 500: "+
			"the first 1 of them start, each with 900 tokens, and this one does not") {
			refused++
		}
	}
	if refused != 63 {
		t.Errorf("%d calls refused for the budget, want 63", refused)
	}
	if spent > 2*1000 {
		t.Errorf("the tree spent %d tokens on a budget of 1000", spent)
	}
	if done := payloads[*messages.TaskCompleted](t, events); len(done) != 1 || done[0].Output != "gathered" {
		t.Errorf("the parent did not go on to its answer: %s", typesOf(events))
	}
}

// A task recorded under decision rules 10 shares its budget as it did: each of
// the 64 children starts with 14 tokens and makes its call.
func TestDelegateFanOutUnderRules10SharesAsBefore(t *testing.T) {
	_, spent, children := fanOutUnderBudget(t, 10)
	if len(children) != 64 || children[0] != 14 || children[63] != 14 {
		t.Fatalf("the children that started had budgets %v, want 64 of 14", children)
	}
	if spent != 32_100 {
		t.Errorf("the tree spent %d tokens, want 32,100 as under rules 10", spent)
	}
}

// From decision rules 11, as under 10, a delegate call requested alone starts
// with what is left of its task's token budget however little (the floor only
// limits how many of the calls requested side by side start): the second child
// starts with 200 tokens, stops after its first call (300), and the parent,
// past its 1,000, stops before another model call
// (TestDelegateChildrenSpendTheParentsBudget under rules 10).
func TestDelegateCallAloneStartsPastTheBudgetsFloor(t *testing.T) {
	lead := func(s llm.ScriptStep) llm.ScriptStep { s.Usage = promptTokens(100); return s }
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead": {lead(delegateCall("d1", "helper", "What is 6*7?")), lead(delegateCall("d2", "helper", "And 7*8?")),
			lead(llm.ScriptStep{Content: "never asked"})},
		"helper": {
			{ToolCalls: []messages.ToolCall{{ID: "h1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}, Usage: promptTokens(300)},
			{Content: "42", Usage: promptTokens(300)},
		},
	})
	n := nodetest.Start(t, subagentsConfig(model))
	events := runAgentTask(t, n, node.Task{Input: "Ask the helper twice.", SessionID: "spender", Agent: "lead", MaxTokens: 1000})
	results := payloads[*messages.ToolCallCompleted](t, events)
	if len(results) != 2 || results[0].Result != "42" || results[1].Usage != promptTokens(300) ||
		!strings.Contains(results[1].Error, messages.ReasonTokenBudget) {
		t.Fatalf("the delegate calls' results: %+v", results)
	}
	k, err := messages.ParseEffectKey(payloads[*messages.ToolCallRequested](t, events)[1].Key)
	if err != nil {
		t.Fatal(err)
	}
	if task, _ := childTask(t, n, node.ChildSessionID(k)); task.MaxTokens != 200 {
		t.Errorf("the second child's budget %d, want the 200 left", task.MaxTokens)
	}
	if f := payloads[*messages.TaskFailed](t, events); len(f) != 1 || f[0].Reason != messages.ReasonTokenBudget {
		t.Errorf("the parent's end: %s", typesOf(events))
	}
}

// From decision rules 11 a fan-out team's aggregator, requested alone after its
// branches, starts with what they left of the team's token budget however
// little: three branches of 900 tokens leave 300 of 3,000, and the aggregator
// answers, where a floor on a call alone failed the team (member_failed) with
// its branches' work lost.
func TestTeamAggregatorStartsPastTheBudgetsFloor(t *testing.T) {
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"a":   {{Content: "A", Usage: promptTokens(900)}},
		"b":   {{Content: "B", Usage: promptTokens(900)}},
		"c":   {{Content: "C", Usage: promptTokens(900)}},
		"agg": {{Content: "A, B and C", Usage: promptTokens(200)}},
	})
	cfg := node.Config{Model: model, Agents: []node.NamedAgent{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "agg"},
		{Name: "panel", Team: &actors.Team{Pattern: actors.TeamFanOut, Members: []actors.TeamMember{{Name: "a"}, {Name: "b"}, {Name: "c"}}, Aggregator: "agg"}},
	}}
	n := nodetest.Start(t, cfg)
	events := runAgentTask(t, n, node.Task{Input: "ask all", SessionID: "panel", Agent: "panel", MaxTokens: 3000})
	if done := payloads[*messages.TaskCompleted](t, events); len(done) != 1 || done[0].Output != "A, B and C" {
		t.Fatalf("the team's end: %s %+v", typesOf(events), payloads[*messages.TaskFailed](t, events))
	}
	ids, calls := teamChildren(t, events)
	if got := strings.Join(calls, " "); got != "branch→a branch→b branch→c aggregate→agg" {
		t.Fatalf("delegations %s", got)
	}
	if task, _ := childTask(t, n, ids[3]); task.MaxTokens != 300 {
		t.Errorf("the aggregator's budget %d, want the 300 left", task.MaxTokens)
	}
}
