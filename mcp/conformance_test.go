package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/tools"
)

// conformance returns the official conformance suite (@modelcontextprotocol/
// conformance's dist/index.js, TROUPE_TEST_MCP_CONFORMANCE) and the Node 22 that runs
// it (TROUPE_TEST_NODE22), or skips.
func conformance(t *testing.T) (node22, suite string) {
	t.Helper()
	suite, node22 = os.Getenv("TROUPE_TEST_MCP_CONFORMANCE"), os.Getenv("TROUPE_TEST_NODE22")
	if suite == "" || node22 == "" {
		t.Skip("TROUPE_TEST_MCP_CONFORMANCE (the conformance package's dist/index.js) and TROUPE_TEST_NODE22 (a Node 22 binary) are not both set; .ci/run installs them")
	}
	return node22, suite
}

// RunConformance runs the conformance CLI with args in a temporary directory, logs
// its summary lines, and fails the test when it exits non-zero (a scenario failed
// that the baseline does not list, or one listed passed).
func RunConformance(t *testing.T, env []string, args ...string) {
	t.Helper()
	node22, suite := conformance(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node22, append([]string{suite}, args...)...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	summary := regexp.MustCompile(`(?m)^\s*([✓✗~] .*|Total: .*|.*[Bb]aseline.*|Running .*)$`)
	for _, line := range summary.FindAllString(string(out), -1) {
		t.Log(strings.TrimSpace(line))
	}
	if err != nil {
		t.Fatalf("conformance %s: %v\n%s", strings.Join(args, " "), err, tail(string(out), 6000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// TestConformanceClient runs the official client suite against this package's Client
// (the test binary is the client program: conformanceClient).
func TestConformanceClient(t *testing.T) {
	conformance(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	baseline, err := filepath.Abs("testdata/conformance-baseline.yml")
	if err != nil {
		t.Fatal(err)
	}
	RunConformance(t, []string{"TROUPE_MCP_CONFORMANCE_CLIENT=1"}, "client", "--command", exe, "--suite", "core", "--expected-failures", baseline)
}

// conformanceClient is the client program the conformance suite drives: it connects
// to the URL it is given with Client, as a node connects to an MCP server of its
// configuration, and does what the scenario (MCP_CONFORMANCE_SCENARIO) asks through
// the catalog's tools. It returns the exit code.
func conformanceClient() int {
	url := os.Args[len(os.Args)-1]
	scenario := os.Getenv("MCP_CONFORMANCE_SCENARIO")
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "scenario %s: "+format+"\n", append([]any{scenario}, args...)...)
		return 1
	}
	srv := mcp.ServerConfig{URL: url, Elicitation: mcp.ElicitDefaults}
	if strings.HasPrefix(scenario, "auth/") {
		// The suite's authorization server approves at once, redirecting to the
		// redirect URI; it accepts a client ID metadata document, and gives the
		// pre-registered client of auth/pre-registration in the context.
		srv.OAuth = &mcp.OAuthConfig{RedirectURL: "http://localhost:3000/callback", ClientMetadataURL: "https://conformance-test.local/client-metadata.json"}
		var sc struct {
			ClientID     string `json:"client_id"`
			ClientSecret string `json:"client_secret"`
		}
		_ = json.Unmarshal([]byte(os.Getenv("MCP_CONFORMANCE_CONTEXT")), &sc)
		if sc.ClientID != "" {
			srv.OAuth.ClientID = sc.ClientID
			if sc.ClientSecret != "" {
				if err := os.Setenv("CONFORMANCE_CLIENT_SECRET", sc.ClientSecret); err != nil {
					return fail("%v", err)
				}
				srv.OAuth.ClientSecretEnv = "CONFORMANCE_CLIENT_SECRET"
			}
		}
	}
	c, err := mcp.NewClient(mcp.ClientConfig{Servers: map[string]mcp.ServerConfig{"conformance": srv}, ConnectTimeout: 20 * time.Second})
	if err != nil {
		return fail("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	go c.Run(ctx)
	defer c.Close()
	if err := c.WaitReady(ctx); err != nil {
		return fail("%v", err)
	}
	if st := c.Status()[0]; st.State != mcp.StateConnected {
		return fail("not connected: %s", st.Error)
	}
	callTool := func(name, args string) int {
		tool, ok := c.Tool("conformance__" + name)
		if !ok {
			return fail("no tool %s among %v", name, c.Status()[0].Tools)
		}
		out, err := tool.Call(ctx, tools.Call{Key: "conformance/1", Arguments: args})
		if err != nil {
			return fail("%s: %v", name, err)
		}
		fmt.Printf("%s: %s\n", name, out)
		return 0
	}
	switch scenario {
	case "initialize":
		return 0
	case "tools_call":
		return callTool("add_numbers", `{"a":5,"b":3}`)
	case "sse-retry":
		return callTool("test_reconnection", `{}`)
	case "elicitation-sep1034-client-defaults":
		return callTool("test_client_elicitation_defaults", `{}`)
	}
	// Any other scenario: list, and call every tool with no arguments.
	for _, name := range c.Status()[0].Tools {
		_ = callTool(strings.TrimPrefix(name, "conformance__"), `{}`)
	}
	return 0
}
