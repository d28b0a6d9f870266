package node_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// The node's context settings are the default agent's, and those a named agent
// does not set; each model call's report says which it ran with.
func TestAgentsRunWithTheirContextSettings(t *testing.T) {
	n := nodetest.Start(t, node.Config{Context: actors.ContextOptions{Window: 6000, ReservedOutput: 300},
		Agents: []node.NamedAgent{{Name: "wide", Context: actors.ContextOptions{Window: 9000}}, {Name: "plain"},
			{Name: "narrow", Context: actors.ContextOptions{Window: 1000}}}}) // valid with the node's reserved output
	for agent, want := range map[string][2]int{"": {6000, 300}, "wide": {9000, 300}, "plain": {6000, 300}, "narrow": {1000, 300}} {
		events := runAgentTask(t, n, node.Task{Input: "What is 12 * (7 + 5)?", SessionID: "ctx-" + agent, Agent: agent})
		calls := 0
		for _, e := range events {
			if e.Type != messages.TypeModelRequested {
				continue
			}
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			calls++
			r := p.(*messages.ModelRequested).Context
			if r == nil || r.Window != want[0] || r.Reserved != want[1] || r.Used > r.Budget {
				t.Errorf("agent %q: report %+v, want window %d and reserved %d", agent, r, want[0], want[1])
			}
		}
		if calls == 0 {
			t.Errorf("agent %q made no model call", agent)
		}
	}
}

func TestContextSettingsAreValidated(t *testing.T) {
	for _, c := range []struct {
		cfg  node.Config
		want string
	}{
		{node.Config{Context: actors.ContextOptions{Window: 10}}, "the default agent: context window 10 is out of range"},
		{node.Config{Agents: []node.NamedAgent{{Name: "a", Context: actors.ContextOptions{ReservedOutput: -1}}}}, `agent "a": context reserved output -1`},
		// A window of its own too small for the default agent's reserved output.
		{node.Config{Context: actors.ContextOptions{ReservedOutput: 3000}, Agents: []node.NamedAgent{{Name: "a", Context: actors.ContextOptions{Window: 2000}}}},
			`agent "a", with the default agent's context settings: context reserved output 3000 is out of range`},
	} {
		c.cfg.DataDir = t.TempDir()
		n, err := node.New(context.Background(), c.cfg)
		if err == nil {
			n.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg.Context, err, c.want)
		}
	}
}
