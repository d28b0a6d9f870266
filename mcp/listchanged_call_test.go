package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

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

// Over HTTP a server may say list_changed on the call's own stream, before its
// answer: the call returns once the new list is in the catalog, as over stdio.
// The SDK's handler of the notification ran apart from the answer, and the call
// returned with the old list. (A notification on the server's other stream, the
// one of no request, is counted as it is read, but nothing orders it before the
// answer.)
func TestHTTPCallThatSaysListChangedOnItsStreamReturnsWithTheNewList(t *testing.T) {
	// The server's own notifications (sent 10 ms after a change, on the stream of
	// no request) are off: the one on the call's stream is the only one.
	srv := sdk.NewServer(&sdk.Implementation{Name: "grower", Version: "1"},
		&sdk.ServerOptions{Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{}}})
	handler := func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{}, nil
	}
	srv.AddTool(&sdk.Tool{Name: "grow", InputSchema: json.RawMessage(`{"type":"object"}`)}, handler)
	var lists atomic.Int64
	srv.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if method == "tools/list" {
				lists.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	hs := httptest.NewServer(hijackCalls(srv, "grow", func(w http.ResponseWriter, r *http.Request, id json.RawMessage) {
		srv.AddTool(&sdk.Tool{Name: "extra", InputSchema: json.RawMessage(`{"type":"object"}`)}, handler)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n")
		fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"grown\"}]}}\n\n", id)
	}))
	t.Cleanup(hs.Close)
	const interval = 100 * time.Millisecond
	c := startClient(t, map[string]mcp.ServerConfig{"grower": {URL: hs.URL}}, func(cfg *mcp.ClientConfig) {
		cfg.RelistInterval = interval
	})
	before := lists.Load()
	if _, ok := c.Tool("grower__extra"); ok {
		t.Fatal("grower__extra is in the catalog before grow")
	}
	if out := mustCall(t, c, "grower__grow", "{}"); out != "grown" {
		t.Fatalf("grow answered %q", out)
	}
	if _, ok := c.Tool("grower__extra"); !ok {
		t.Fatalf("grow answered after its list_changed, yet the catalog lacks grower__extra: %v", names(c))
	}
	time.Sleep(3 * interval) // past the interval: a second listing would have come
	if got := lists.Load() - before; got != 1 {
		t.Errorf("one list_changed was followed by %d listings, want 1", got)
	}
}
