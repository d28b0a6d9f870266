package mcp_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
)

// A server that sends list_changed without pause (here a tool that comes and
// goes) had its whole offer listed again at each one, back to back: for a
// thousand tools most of a core, each change passed on to the node's own MCP
// clients. The client lists at most once per RelistInterval, and the last
// change is still followed.
func TestListChangedStormIsListedAtMostOncePerInterval(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "chatty", Version: "1"}, nil)
	var lists atomic.Int64
	srv.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if method == "tools/list" {
				lists.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	handler := func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{}, nil
	}
	srv.AddTool(&sdk.Tool{Name: "stays", InputSchema: json.RawMessage(`{"type":"object"}`)}, handler)
	const interval = 300 * time.Millisecond
	c := startClient(t, map[string]mcp.ServerConfig{"chatty": {Transport: mcp.InProcess(srv)}}, func(cfg *mcp.ClientConfig) {
		cfg.RelistInterval = interval
	})
	before, start := lists.Load(), time.Now()
	const changes = 41 // odd: the tool is there at the end
	for i := range changes {
		if i%2 == 0 {
			srv.AddTool(&sdk.Tool{Name: "flaps", InputSchema: json.RawMessage(`{"type":"object"}`)}, handler)
		} else {
			srv.RemoveTools("flaps")
		}
		time.Sleep(15 * time.Millisecond) // past the SDK server's 10 ms of coalescing: a notification each
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, ok := c.Tool("chatty__flaps"); !ok; _, ok = c.Tool("chatty__flaps") {
		if time.Now().After(deadline) {
			t.Fatalf("the last change (the tool back) is not in the catalog: %v", c.Specs())
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	// Not a bound on time: the listings the elapsed time allows, whatever it was.
	if got, most := lists.Load()-before, int64(elapsed/interval)+2; got > most {
		t.Errorf("%d list_changed in %v were followed by %d listings, want at most %d (one per %v)", changes, elapsed, got, most, interval)
	}
}
