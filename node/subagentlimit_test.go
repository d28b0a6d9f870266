package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// delegateCalls is a model step calling delegate n times at once.
func delegateCalls(n int, agent string) llm.ScriptStep {
	var s llm.ScriptStep
	for i := range n {
		args, _ := json.Marshal(map[string]string{"agent": agent, "task": fmt.Sprintf("part %d", i)})
		s.ToolCalls = append(s.ToolCalls, messages.ToolCall{ID: fmt.Sprintf("d%d", i), Name: node.DelegateTool, Arguments: string(args)})
	}
	return s
}

// One reply that delegates past the bound starts no more child sessions than a
// task may (node.DefaultMaxSubAgents, or its agent's max_subagents): the calls past
// it, in their order, are error results saying so, and the parent goes on; the
// parent verifies as deterministic.
func TestDelegateChildSessionsOfATaskAreBounded(t *testing.T) {
	for _, c := range []struct {
		name  string
		own   int // the lead's MaxSubAgents
		limit int
	}{
		{"default", 0, node.DefaultMaxSubAgents},
		{"own", 3, 3},
	} {
		t.Run(c.name, func(t *testing.T) { testSubAgentsBound(t, c.own, c.limit) })
	}
}

func testSubAgentsBound(t *testing.T, own, limit int) {
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead": {delegateCalls(limit+8, "leaf"), {Content: "gathered"}},
		"leaf": {{Content: "ok"}},
	})
	cfg := subagentsConfig(model)
	cfg.Agents[0].MaxSubAgents = own
	cfg.Agents = append(cfg.Agents, node.NamedAgent{Name: "leaf", SystemPrompt: "You answer."})
	n := nodetest.Start(t, cfg)
	events := runAgentTask(t, n, node.Task{Input: "fan out", SessionID: "wide", Agent: "lead"})
	if ended := payloads[*messages.TaskCompleted](t, events); len(ended) != 1 || ended[0].Output != "gathered" {
		t.Fatalf("the parent did not go on: %s", typesOf(events))
	}
	refused := 0
	for _, c := range payloads[*messages.ToolCallCompleted](t, events) {
		if strings.Contains(c.Error, fmt.Sprintf("has started %d sub-agents", limit)) && strings.Contains(c.Error, "max_subagents") {
			refused++
			var i int
			if _, err := fmt.Sscanf(c.CallID, "d%d", &i); err != nil || i < limit {
				t.Errorf("call %s refused; want only the calls past the first %d", c.CallID, limit)
			}
		}
	}
	infos, err := n.Log().Sessions(context.Background(), eventlog.Filter{SessionsOnly: true, Prefix: "wide.sub"})
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) > limit || refused != 8 {
		t.Errorf("one reply of %d delegate calls started %d child sessions (%d calls refused); want at most %d and 8 refused with a clear error",
			limit+8, len(infos), refused, limit)
	}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
		t.Errorf("verify: %+v %v", div, err)
	}
}

// A team may always make the hand-overs its pattern needs, whatever the node's
// bound (a fan-out of three and its aggregator under Config.MaxSubAgents 3); a
// team's own max_subagents below them is refused when the node is made.
func TestTeamMakesTheHandOversItsPatternNeeds(t *testing.T) {
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"a": {{Content: "A"}}, "b": {{Content: "B"}}, "c": {{Content: "C"}}, "agg": {{Content: "ABC"}},
	})
	panel := &actors.Team{Pattern: actors.TeamFanOut, Members: []actors.TeamMember{{Name: "a"}, {Name: "b"}, {Name: "c"}}, Aggregator: "agg"}
	cfg := node.Config{Model: model, MaxSubAgents: 3, Agents: []node.NamedAgent{
		{Name: "a", Tools: []string{}}, {Name: "b", Tools: []string{}}, {Name: "c", Tools: []string{}}, {Name: "agg", Tools: []string{}},
		{Name: "panel", Team: panel},
	}}
	n := nodetest.Start(t, cfg)
	events := runAgentTask(t, n, node.Task{Input: "each of you", SessionID: "fan", Agent: "panel"})
	if got := payloads[*messages.TaskCompleted](t, events); len(got) != 1 || got[0].Output != "ABC" {
		t.Fatalf("the team's end: %s", typesOf(events))
	}
	cfg.Agents[4].MaxSubAgents = 3
	if _, err := node.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "max_subagents 3 is fewer than the hand-overs its fan_out pattern may make in a task (4)") {
		t.Errorf("a team bounded below its hand-overs: %v", err)
	}
}
