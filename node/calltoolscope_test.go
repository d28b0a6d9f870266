package node_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// memoryChain adds a fact to memory, then searches it.
var memoryChain = tools.Chain{Name: "remember", Description: "Remembers a fact and finds it again.",
	InputSchema: []byte(`{"type":"object","properties":{"fact":{"type":"string"}},"required":["fact"]}`),
	Steps: []tools.ChainStep{
		{Name: "add", Tool: "memory", Args: `{"op":"add","args":{"content":{{json .args.fact}}}}`},
		{Name: "find", Tool: "memory", Args: `{"op":"search","args":{"query":{{json .args.fact}}}}`},
	}}

// runEvents runs one task of agent in session and returns the session's events.
func runEvents(t *testing.T, n *node.Node, session, agent, input string) []messages.Envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := n.RunTask(ctx, node.Task{Input: input, SessionID: session, Agent: agent}); err != nil {
		t.Fatal(err)
	}
	events, err := n.Log().Read(ctx, session, 1)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// A named agent whose memory tool needs approval cannot write memory unapproved
// through call_tool of a chain outside its tools: call_tool refuses the chain, and
// none of its steps runs. With the chain among its tools, the chain's call waits
// for approval before any step runs.
func TestCallToolOfAnUnlistedChainDoesNotBypassApproval(t *testing.T) {
	cfg := func(agentTools []string, model llm.Model) node.Config {
		return node.Config{DataDir: t.TempDir(), Memory: &memory.Config{}, Disclosure: disclosure.Search,
			MemoryTool: &memory.ToolConfig{Namespace: "agent:default"}, Chains: []tools.Chain{memoryChain},
			Agents: []node.NamedAgent{{Name: "writer", MemoryNamespace: "agent:writer", Tools: agentTools, Approvals: []string{"memory"}}},
			Model:  model}
	}
	remember := call("c1", "call_tool", `{"name":"remember","arguments":{"fact":"the sky is green"}}`)

	t.Run("unlisted", func(t *testing.T) {
		n := nodetest.Start(t, cfg([]string{"call_tool", "memory"}, (&requestLog{}).model(t, remember, llm.ScriptStep{Content: "noted"})))
		events := runEvents(t, n, "s-1", "writer", "remember that the sky is green")
		for _, e := range events {
			if e.Type == messages.TypeApprovalRequested {
				continue
			}
			if p, err := e.Decode(); err == nil {
				if r, ok := p.(*messages.ToolCallRequested); ok && r.Chain != "" {
					t.Fatalf("a step of the unlisted chain ran: %+v", r)
				}
			}
		}
		a := toolResults(t, events)["c1"]
		if a.Error == "" || !strings.Contains(a.Error, `"remember" is not a tool of this agent`) || strings.Contains(a.Result, "the sky is green") {
			t.Fatalf("call_tool of the unlisted chain answered %+v, want it refused", a)
		}
	})

	t.Run("listed", func(t *testing.T) {
		n := nodetest.Start(t, cfg([]string{"call_tool", "memory", "remember"}, (&requestLog{}).model(t, remember, llm.ScriptStep{Content: "noted"})))
		if _, err := n.Submit(context.Background(), node.Task{Input: "remember that the sky is green", SessionID: "s-2", Agent: "writer"}); err != nil {
			t.Fatal(err)
		}
		p := waitApproval(t, n, "s-2")
		if p.Call != "c1" || p.Tool != "call_tool" {
			t.Fatalf("pending approval %+v, want call_tool's c1", p)
		}
		events, err := n.Log().Read(context.Background(), "s-2", 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if d, err := e.Decode(); err == nil {
				if r, ok := d.(*messages.ToolCallRequested); ok && r.Chain != "" {
					t.Fatalf("a step of the chain was requested before its approval: %+v", r)
				}
			}
		}
	})
}

// A named agent's call_tool of a tool of the node outside its tools is refused with
// a tool error the model reads, and the tool does not run; the task goes on.
func TestCallToolOfAnUnlistedToolIsRefused(t *testing.T) {
	var sent atomic.Int64
	cfg := node.Config{DataDir: t.TempDir(), Disclosure: disclosure.Search, Tools: []tools.Tool{tools.Calculator{}, emailTool{&sent}},
		Agents: []node.NamedAgent{{Name: "calc", Tools: []string{"call_tool", "calculator"}}},
		Model: (&requestLog{}).model(t, call("c1", "call_tool", `{"name":"send_email","arguments":{"to":"bob@example.com"}}`),
			call("c2", "call_tool", `{"name":"calculator","arguments":{"expression":"6*7"}}`), llm.ScriptStep{Content: "done"})}
	n := nodetest.Start(t, cfg)
	res := toolResults(t, runEvents(t, n, "s-1", "calc", "mail bob"))
	if got := res["c1"]; !strings.Contains(got.Error, `"send_email" is not a tool of this agent`) {
		t.Fatalf("call_tool of send_email answered %+v, want it refused", got)
	}
	if sent.Load() != 0 {
		t.Fatal("call_tool ran a tool outside the agent's tools")
	}
	if got := res["c2"]; got.Error != "" || got.Result != "42" {
		t.Fatalf("call_tool of the agent's own calculator answered %+v, want 42", got)
	}
}

// A named agent's search_tools finds only its tools: a tool of the same MCP server
// that it does not list is not among the matches.
func TestSearchToolsFindsOnlyTheAgentsTools(t *testing.T) {
	cfg := node.Config{DataDir: t.TempDir(), Disclosure: disclosure.Search, Tools: serverTools(),
		Agents: []node.NamedAgent{{Name: "opener", Tools: []string{"search_tools", "call_tool", "tickets_open"}}},
		Model:  (&requestLog{}).model(t, call("c1", "search_tools", `{"query":"tickets"}`), llm.ScriptStep{Content: "found"})}
	n := nodetest.Start(t, cfg)
	got := toolResults(t, runEvents(t, n, "s-1", "opener", "find the tickets tools"))["c1"]
	if got.Error != "" || !strings.Contains(got.Result, `"tickets_open"`) || strings.Contains(got.Result, "tickets_close") {
		t.Fatalf("search_tools answered %+v, want tickets_open and not tickets_close", got)
	}
}
