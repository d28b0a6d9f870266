package mcp_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// Under the catalog and search disclosure strategies, the MCP server offers the
// agent's tools, every one of them, and run_task, but not the strategy's own
// (load_tools; search_tools and call_tool), which load tools into a session's
// model requests: over MCP they were offered and answered as if they did (a
// load_tools "loaded" a group, whose tools joined no list of the client's).
func TestServerOffersNoDisclosureTools(t *testing.T) {
	for _, strategy := range []disclosure.Strategy{disclosure.Catalog, disclosure.Search} {
		t.Run(string(strategy), func(t *testing.T) {
			var calls atomic.Int32
			n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused"), Disclosure: strategy,
				Tools: []tools.Tool{tools.Calculator{}, countTool{&calls}}})
			cs := connect(t, mcp.NewServer(n, mcp.ServerOptions{}), nil)
			want := []string{"calculator", "count", mcp.RunTask, mcp.TaskResult}
			slices.Sort(want)
			if got := toolNames(t, cs); !slices.Equal(got, want) {
				t.Errorf("tools %q, want %q", got, want)
			}
			for _, name := range []string{"load_tools", "search_tools", "call_tool"} {
				res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: map[string]any{"group": "x", "query": "count", "name": "count", "arguments": map[string]any{}}})
				if err == nil {
					t.Errorf("%s: answered %v %q, want an unknown tool", name, res.IsError, textOf(res))
				}
			}
			if got := calls.Load(); got != 0 {
				t.Errorf("count was called %d times", got)
			}
		})
	}
}
