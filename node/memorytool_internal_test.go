package node

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// On a cluster, a memory tool call travels to the namespace's owner with the agent
// it is for (memoryToolArgs.Agent): the owner runs it on that agent's tool, so a call
// naming no namespace lands in the agent's own, and the call of an agent without one
// (or of the node's agent), in the node's.
func TestRoutedMemoryToolCallRunsAsItsAgent(t *testing.T) {
	ctx := context.Background()
	n, err := New(ctx, Config{DataDir: t.TempDir(), Memory: &memory.Config{},
		MemoryTool: &memory.ToolConfig{Namespace: "agent:default"},
		Agents:     []NamedAgent{{Name: "a", MemoryNamespace: "agent:a"}, {Name: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	for _, c := range []struct{ agent, content, ns string }{
		{"a", "for a", "agent:a"},
		{"b", "for b", "agent:default"},
		{"", "for default", "agent:default"},
	} {
		args, _ := json.Marshal(memoryToolArgs{Tool: "memory", Agent: c.agent,
			Arguments: `{"op":"add","args":{"content":"` + c.content + `"}}`})
		res, err := n.memoryLocal(ctx, messages.MemoryCommand{Namespace: c.ns, Action: memoryToolCall, Key: "k-" + c.content, Args: args}, 0)
		var ans memoryToolAnswer
		if err != nil || json.Unmarshal(res, &ans) != nil || ans.Error != "" || ans.Invalid != nil {
			t.Fatalf("agent %q: %s %v", c.agent, res, err)
		}
		ns, err := n.memories.Namespace(ctx, c.ns)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, m := range ns.Snapshot() {
			found = found || m.Content == c.content
		}
		if !found {
			t.Errorf("agent %q's memory %q is not in %s", c.agent, c.content, c.ns)
		}
	}
	args, _ := json.Marshal(memoryToolArgs{Tool: "memory_add", Agent: "a", Arguments: `{}`})
	if _, err := n.memoryLocal(ctx, messages.MemoryCommand{Action: memoryToolCall, Args: args}, 0); err == nil || !strings.Contains(err.Error(), `no memory tool "memory_add" for agent "a"`) {
		t.Errorf("a call of a tool the agent does not have: %v", err)
	}
}
