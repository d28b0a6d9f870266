package node

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// A node serving tools for sessions of other nodes gets a call's agent with the
// call (messages.EffectRequest.Agent): a call_tool of an agent it does not run (it
// was not given the agents file) reaches none of its tools, where it reached every
// one, whatever the agent's list on the session's node. The default agent, and a
// named agent without a list, still reach every tool.
func TestCallToolOfAnAgentTheNodeDoesNotRunIsRefused(t *testing.T) {
	var sent atomic.Int64
	email, err := tools.Func("send_email", "Sends an email.", func(context.Context, struct {
		To string `json:"to"`
	}) (string, error) {
		sent.Add(1)
		return "sent", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, agents := range [][]NamedAgent{nil, {{Name: "open"}, {Name: "calc", Tools: []string{"call_tool", "calculator"}}}} {
		c := Config{DataDir: t.TempDir(), Disclosure: disclosure.Search, Tools: []tools.Tool{tools.Calculator{}, email}, Agents: agents}
		c.setDefaults()
		_, reg, err := c.defaultAgent()
		if err != nil {
			t.Fatal(err)
		}
		ct, ok := reg.Get(disclosure.ToolCallTool)
		if !ok {
			t.Fatal("no call_tool")
		}
		call := func(agent string) (string, error) {
			return ct.Call(context.Background(), tools.Call{Key: "s/1", Agent: agent, Arguments: `{"name":"send_email","arguments":{"to":"bob@example.com"}}`})
		}
		if _, err := call("writer"); err == nil || !strings.Contains(err.Error(), `"send_email" is not a tool of this agent`) {
			t.Fatalf("agents %v: call_tool of agent writer, which the node does not run, answered %v, want it refused", agents, err)
		}
		if sent.Load() != 0 {
			t.Fatalf("agents %v: call_tool ran a tool for an agent the node does not run", agents)
		}
		want := []string{"", "default"}
		if agents != nil {
			want = append(want, "open")
		}
		for _, agent := range want {
			if out, err := call(agent); err != nil || out != "sent" {
				t.Fatalf("agents %v: call_tool of agent %q answered %q, %v; want the tool run", agents, agent, out, err)
			}
		}
		sent.Store(0)
	}
}
