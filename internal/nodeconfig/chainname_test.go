package nodeconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A chain named in a configured MCP server's namespace ("<server>__<tool>") would
// hide that server's tool of the name, silently (the catalog drops a tool named
// like one of the agent's): the file is refused, naming the chain and the server.
// A name under a server the file does not configure is the chain's to take.
func TestChainNamedLikeAnMCPServersToolIsRefused(t *testing.T) {
	load := func(body string) error {
		path := filepath.Join(t.TempDir(), "node.json")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		return err
	}
	chain := func(name string) string {
		return `{"mcp_servers": {"ev": {"command": "ev-server"}},
			"chains": [{"name": "` + name + `", "description": "d", "input_schema": {"type": "object", "properties": {}},
				"steps": [{"name": "a", "tool": "calculator", "args": "{\"expression\": \"1+1\"}"}]}]}`
	}
	err := load(chain("ev__echo"))
	if err == nil || !strings.Contains(err.Error(), `chains: chain "ev__echo"`) || !strings.Contains(err.Error(), `MCP server "ev"`) {
		t.Fatalf("a chain named ev__echo beside the server ev: %v, want it refused naming the chain and the server", err)
	}
	if err := load(chain("other__echo")); err != nil {
		t.Fatalf("a chain named other__echo, no server other: %v", err)
	}
}

// The remote A2A agents' tools are named a2a__<name>: an MCP server named a2a
// beside them would have its tool named like an agent hidden by the agent's,
// silently. The file is refused; without a2a_agents the name is the server's.
func TestMCPServerNamedLikeTheA2AToolsIsRefused(t *testing.T) {
	load := func(body string) error {
		path := filepath.Join(t.TempDir(), "node.json")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		return err
	}
	err := load(`{"mcp_servers": {"a2a": {"command": "a2a-server"}}, "a2a_agents": {"echo": "http://127.0.0.1:1/.well-known/agent-card.json"}}`)
	if err == nil || !strings.Contains(err.Error(), `mcp_servers: the server name "a2a"`) {
		t.Fatalf("an MCP server a2a beside a2a_agents: %v, want it refused naming the server", err)
	}
	if err := load(`{"mcp_servers": {"a2a": {"command": "a2a-server"}}}`); err != nil {
		t.Fatalf("an MCP server a2a, no a2a_agents: %v", err)
	}
}
