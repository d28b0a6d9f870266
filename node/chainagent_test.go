package node_test

import (
	"context"
	"strings"
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

// A chain called through call_tool, for a named agent with a memory namespace of
// its own, calls its steps for that agent: its memory step writes and reads the
// agent's namespace, not the node's.
func TestChainInOneCallActsForTheAgent(t *testing.T) {
	remember := tools.Chain{Name: "remember", Description: "Remembers a fact and finds it again.",
		InputSchema: []byte(`{"type":"object","properties":{"fact":{"type":"string"}},"required":["fact"]}`),
		Steps: []tools.ChainStep{
			{Name: "add", Tool: "memory", Args: `{"op":"add","args":{"content":{{json .args.fact}}}}`},
			{Name: "find", Tool: "memory", Args: `{"op":"search","args":{"query":{{json .args.fact}}}}`},
		}}
	cfg := node.Config{DataDir: t.TempDir(), Memory: &memory.Config{}, Disclosure: disclosure.Search,
		MemoryTool: &memory.ToolConfig{Namespace: "agent:default"}, Chains: []tools.Chain{remember},
		// The writer calls the chain through call_tool: call_tool calls only the
		// tools the agent lists, so it lists the chain and its steps' tool.
		Agents: []node.NamedAgent{{Name: "writer", MemoryNamespace: "agent:writer", Tools: []string{"call_tool", "memory", "remember"}}},
		Model: (&requestLog{}).model(t, call("c1", "call_tool", `{"name":"remember","arguments":{"fact":"the sky is green"}}`),
			llm.ScriptStep{Content: "noted"})}
	n := nodetest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := n.RunTask(ctx, node.Task{Input: "remember that the sky is green", SessionID: "s-1", Agent: "writer"}); err != nil {
		t.Fatal(err)
	}
	events, err := n.Log().Read(ctx, "s-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	var a messages.ToolCallCompleted
	for _, e := range events {
		if p, err := e.Decode(); err == nil {
			if c, ok := p.(*messages.ToolCallCompleted); ok && c.CallID == "c1" {
				a = *c
			}
		}
	}
	if a.Error != "" || !strings.Contains(a.Result, `"namespace":"agent:writer"`) || !strings.Contains(a.Result, "the sky is green") {
		t.Fatalf("call_tool of the chain for writer answered %+v, want the fact found in agent:writer", a)
	}
}
