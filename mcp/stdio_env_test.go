package mcp_test

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/mcp"
)

// envServer is a stdio server whose tool "env" answers its environment, one
// "NAME=value" a line, sorted.
func envServer() {
	out := bufio.NewWriter(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(in.Bytes(), &req) != nil || req.ID == nil {
			continue
		}
		var result any = map[string]any{}
		switch req.Method {
		case "initialize":
			result = map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]any{"name": "env", "version": "1"}}
		case "tools/list":
			result = map[string]any{"tools": []any{map[string]any{"name": "env", "inputSchema": map[string]any{"type": "object"}}}}
		case "tools/call":
			result = map[string]any{"content": []any{map[string]any{"type": "text", "text": strings.Join(slices.Sorted(slices.Values(os.Environ())), "\n")}}}
		}
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result})
		out.Write(b)
		out.WriteByte('\n')
		out.Flush()
	}
}

// A stdio server gets the node's PATH, HOME and the like, and its configured env,
// and none of the node's other variables (its API tokens, secret key and model
// keys) unless "pass_env" names them; ["*"] passes them all. It got the node's
// whole environment: an npx server the configuration names got
// TROUPE_AUTH_TOKENS, TROUPE_SECRET_KEY and OPENAI_API_KEY.
func TestStdioServerGetsNotTheNodesEnvironment(t *testing.T) {
	t.Setenv("TROUPE_AUTH_TOKENS", "tok-node-api-4f9a2c7e")
	t.Setenv("TROUPE_SECRET_KEY", "key-node-secret-b18d60")
	t.Setenv("OPENAI_API_KEY", "sk-node-model-key-77c1")
	t.Setenv("GITHUB_TOKEN", "ghp-passed-by-name-0a9e")
	t.Setenv("PATH", os.Getenv("PATH")+string(os.PathListSeparator)+"/troupe-test-path")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	server := func(pass ...string) mcp.ServerConfig {
		return mcp.ServerConfig{Command: exe, PassEnv: pass, Env: map[string]string{"TROUPE_MCP_TEST_SERVER": "env", "CONFIGURED": "yes", "HOME": "/configured-home"}}
	}
	c := startClient(t, map[string]mcp.ServerConfig{
		"plain":  server(),
		"github": server("GITHUB_*", "NOT_SET"),
		"all":    server("*"),
	}, nil)
	lines := func(tool string) []string { return strings.Split(mustCall(t, c, tool, "{}"), "\n") }
	has := func(env []string, kv string) bool { return slices.Contains(env, kv) }

	plain := lines("plain__env")
	for _, kv := range []string{"PATH=" + os.Getenv("PATH"), "CONFIGURED=yes", "HOME=/configured-home", "TROUPE_MCP_TEST_SERVER=env"} {
		if !has(plain, kv) {
			t.Errorf("the server lacks %s; it got %q", kv, plain)
		}
	}
	for _, secret := range []string{"tok-node-api", "key-node-secret", "sk-node-model", "ghp-passed"} {
		if got := strings.Join(plain, "\n"); strings.Contains(got, secret) {
			t.Errorf("the server got the node's %s…:\n%s", secret, got)
		}
	}
	for _, kv := range plain {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(mcp.DefaultEnv(), name) && name != "CONFIGURED" && name != "TROUPE_MCP_TEST_SERVER" {
			t.Errorf("the server got %s, neither a default variable nor a configured one", name)
		}
	}

	github := lines("github__env")
	if !has(github, "GITHUB_TOKEN=ghp-passed-by-name-0a9e") || !has(github, "CONFIGURED=yes") || !has(github, "PATH="+os.Getenv("PATH")) {
		t.Errorf("pass_env [GITHUB_*] did not pass GITHUB_TOKEN, or lost the rest: %q", github)
	}
	if got := strings.Join(github, "\n"); strings.Contains(got, "tok-node-api") || strings.Contains(got, "sk-node-model") {
		t.Errorf("pass_env [GITHUB_*] passed more:\n%s", got)
	}

	all := lines("all__env")
	for _, kv := range []string{"TROUPE_AUTH_TOKENS=tok-node-api-4f9a2c7e", "TROUPE_SECRET_KEY=key-node-secret-b18d60", "OPENAI_API_KEY=sk-node-model-key-77c1", "CONFIGURED=yes", "HOME=/configured-home"} {
		if !has(all, kv) {
			t.Errorf(`pass_env ["*"] did not pass %s: %q`, kv, all)
		}
	}
}

// "pass_env" is checked: a pattern that names no variable, and one on a "url"
// server, are refused with the field named.
func TestPassEnvIsChecked(t *testing.T) {
	for _, tc := range []struct {
		cfg  mcp.ServerConfig
		want string
	}{
		{mcp.ServerConfig{Command: "x", PassEnv: []string{""}}, `mcp_servers.s.pass_env[0]: "" is not a variable name or glob`},
		{mcp.ServerConfig{Command: "x", PassEnv: []string{"A", "B=C"}}, `mcp_servers.s.pass_env[1]: "B=C"`},
		{mcp.ServerConfig{Command: "x", PassEnv: []string{"GITHUB_["}}, `mcp_servers.s.pass_env[0]: "GITHUB_["`},
		{mcp.ServerConfig{Command: "x", PassEnv: []string{" PATH"}}, `mcp_servers.s.pass_env[0]: " PATH"`},
		{mcp.ServerConfig{URL: "http://h/mcp", PassEnv: []string{"*"}}, `mcp_servers.s.pass_env: is for a "command" server`},
	} {
		if err := tc.cfg.Validate("s"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %s", tc.cfg.PassEnv, err, tc.want)
		}
	}
	if err := (mcp.ServerConfig{Command: "x", PassEnv: []string{"*", "GITHUB_*", "NODE_ENV"}}).Validate("s"); err != nil {
		t.Errorf("valid pass_env refused: %v", err)
	}
}
