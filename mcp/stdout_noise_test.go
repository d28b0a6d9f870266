package mcp_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/mcp"
)

// A stdio server that prints a line that is not JSON on its stdout before it speaks
// MCP (a banner, "Server running on stdio", as many servers' console.log does) is
// used as the MCP SDKs' own clients use it (Python's and TypeScript's skip such a
// line and go on): it connects and its tools answer. The line was taken for the
// server's answer to initialize: "invalid character 'S' looking for beginning of
// value", the connection closed, and the server retried for ever, never connected.
func TestStdoutBannerBeforeInitialize(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := mcp.ServerConfig{Command: "sh", Args: []string{"-c", `echo "Starting server v1 on stdio ..."; echo; exec "$0"`, exe},
		Env: map[string]string{"TROUPE_MCP_TEST_SERVER": "hostile"}}
	c := startClient(t, map[string]mcp.ServerConfig{"banner": cfg}, func(cfg *mcp.ClientConfig) { cfg.ConnectTimeout = 10 * time.Second })
	if st := c.Status()[0]; st.State != mcp.StateConnected || st.Connects != 1 {
		t.Fatalf("status %+v, want connected at the first attempt", st)
	}
	if out := mustCall(t, c, "banner__ok", "{}"); out != "fine" {
		t.Errorf("ok answered %q", out)
	}
	if out := mustCall(t, c, "banner__meta", "{}"); !strings.Contains(out, "test-session/1") {
		t.Errorf("meta answered %q", out)
	}
}
