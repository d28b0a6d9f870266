package mcp_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/mcp"
)

// A server that changes its tools in a call says so (list_changed) before it
// answers: the call returns once the catalog has the new list, so that the agent's
// next model request, built the moment the result is in, offers the new tool and a
// call of it is not refused as unknown (a dynamic toolset enabled by a tool call).
func TestCallThatChangesTheToolListReturnsWithTheNewList(t *testing.T) {
	c := startClient(t, map[string]mcp.ServerConfig{"hostile": testServer(t, "hostile")}, nil)
	if _, ok := c.Tool("hostile__extra"); ok {
		t.Fatal("hostile__extra is in the catalog before grow")
	}
	mustCall(t, c, "hostile__grow", "{}")
	if _, ok := c.Tool("hostile__extra"); !ok {
		t.Fatalf("grow answered after its list_changed, yet the catalog lacks hostile__extra: %v", names(c))
	}
}

// One list_changed is followed by one listing: the stdio connection counts it as
// it reads it, and the SDK's handler of the same notification asked for a
// second listing (a second tools/list of a server that may offer a thousand
// tools, RelistInterval later), and a call that saw its count waited for that
// one too.
func TestListChangedReadOnceIsListedOnce(t *testing.T) {
	lists := filepath.Join(t.TempDir(), "lists")
	cfg := testServer(t, "hostile")
	cfg.Env["TROUPE_MCP_TEST_LISTS"] = lists
	const interval = 100 * time.Millisecond
	c := startClient(t, map[string]mcp.ServerConfig{"hostile": cfg}, func(cfg *mcp.ClientConfig) {
		cfg.RelistInterval = interval
	})
	count := func() int {
		b, _ := os.ReadFile(lists)
		return strings.Count(string(b), "\n")
	}
	before := count()
	const calls = 4
	for range calls {
		mustCall(t, c, "hostile__grow", "{}")
		time.Sleep(3 * interval) // past the interval: a listing may follow each
	}
	if got := count() - before; got != calls {
		t.Errorf("%d calls that each sent one list_changed were followed by %d listings, want %d", calls, got, calls)
	}
}
