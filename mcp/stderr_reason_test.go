package mcp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/mcp"
)

// A stdio server that fails at start (a module missing, a bad flag) says why on its
// stderr: the server's status gives the last lines of it. It said only
// `connect: connection closed: calling "initialize": client is closing: EOF`, the
// reason being logged at debug level, which a node does not show by default.
func TestStdioServerThatFailsAtStartSaysWhy(t *testing.T) {
	cfg := mcp.ServerConfig{Command: "sh", Args: []string{"-c",
		`echo "Traceback (most recent call last):" >&2; echo "ModuleNotFoundError: No module named 'mcp.server.fastmcp'" >&2; exit 1`}}
	c := startClient(t, map[string]mcp.ServerConfig{"py": cfg}, func(cfg *mcp.ClientConfig) { cfg.MinBackoff = time.Minute })
	waitFor(t, 10*time.Second, "down", func() bool { return c.Status()[0].State == mcp.StateDown })
	if st := c.Status()[0]; !strings.Contains(st.Error, "ModuleNotFoundError: No module named 'mcp.server.fastmcp'") {
		t.Errorf("status error %q lacks what the server wrote on its stderr", st.Error)
	}
}
