package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// weatherServer is an MCP server of two tools, served in this process.
func weatherServer() *sdk.Server {
	srv := sdk.NewServer(&sdk.Implementation{Name: "weather", Version: "1"}, nil)
	type place struct {
		City string `json:"city" jsonschema:"the city"`
	}
	sdk.AddTool(srv, &sdk.Tool{Name: "forecast", Description: "Forecast the weather of a city for the next days"},
		func(_ context.Context, _ *sdk.CallToolRequest, p place) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "sunny in " + p.City}}}, nil, nil
		})
	sdk.AddTool(srv, &sdk.Tool{Name: "alerts", Description: "List the storm and heat alerts of a region"},
		func(_ context.Context, _ *sdk.CallToolRequest, p place) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "no alerts"}}}, nil, nil
		})
	return srv
}

// connect returns an MCP client of srv, named name, connected and listed.
func connect(t testing.TB, name string, srv *sdk.Server) *mcp.Client {
	t.Helper()
	c, err := mcp.NewClient(mcp.ClientConfig{Servers: map[string]mcp.ServerConfig{name: {Transport: mcp.InProcess(srv)}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		c.Close()
		<-done
	})
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := c.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	if st := c.Status(); len(st) != 1 || st[0].State != mcp.StateConnected {
		t.Fatalf("status = %+v", st)
	}
	return c
}

// Under search, a node's MCP servers' tools are searched like its own: the first
// request offers none of them and the system prompt names the server; search_tools
// finds the server's tool, which joins the next requests; call_tool and a direct
// call both reach the server; and the recorded session verifies against the agent.
func TestSearchDisclosesMCPTools(t *testing.T) {
	client := connect(t, "wx", weatherServer())
	rec := &requestLog{}
	cfg := node.Config{Tools: []tools.Tool{tools.Calculator{}}, ToolCatalog: client, Disclosure: disclosure.Search,
		Model: rec.model(t,
			call("s1", "search_tools", `{"query":"weather forecast of a city","limit":1}`),
			call("s2", "call_tool", `{"name":"wx__alerts","arguments":{"city":"Oslo"}}`),
			call("s3", "wx__forecast", `{"city":"Paris"}`),
			llm.ScriptStep{Content: "sunny"})}
	n := nodetest.Start(t, cfg)
	events := nodetest.Run(t, n, "mcp-search", "weather in paris?")
	sections, names, system := rec.get()
	if len(names) != 4 || names[0] != "calculator,call_tool,search_tools" || names[1] != "calculator,call_tool,search_tools,wx__forecast" {
		t.Fatalf("requests offered %v", names)
	}
	for i := 2; i < len(sections); i++ {
		if sections[i] != sections[1] || system[i] != system[0] {
			t.Errorf("request %d's prompt differs from request 2's", i+1)
		}
	}
	if !strings.Contains(system[0], "2 more tools are available (from mcp:wx)") {
		t.Errorf("system prompt:\n%s", system[0])
	}
	res := toolResults(t, events)
	if r := res["s1"]; r.Error != "" || !strings.Contains(r.Result, `"loaded":["wx__forecast"]`) {
		t.Errorf("search_tools = %+v", r)
	}
	if r := res["s2"]; r.Error != "" || r.Result != "no alerts" {
		t.Errorf("call_tool of the server's tool = %+v", r)
	}
	if r := res["s3"]; r.Error != "" || r.Result != "sunny in Paris" {
		t.Errorf("the server's tool called directly = %+v", r)
	}
	agent, err := cfg.Agent()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := actors.Verify(agent, events); err != nil || div != nil {
		t.Fatalf("verify: %v %v", div, err)
	}
}

// Under catalog, an MCP server is a group: when it adds a tool while a session runs
// (notifications/tools/list_changed), the next request's group line counts it, and
// loading the group loads it; the requests before the change and after the load each
// keep their prompt from step to step.
func TestCatalogGroupFollowsAnMCPServer(t *testing.T) {
	srv := weatherServer()
	client := connect(t, "wx", srv)
	rec := &requestLog{}
	scripted := rec.model(t,
		call("l1", "load_tools", `{"group":"mcp:wx"}`),
		call("r1", "wx__radar", `{"city":"Bergen"}`),
		llm.ScriptStep{Content: "rain"})
	first := true
	model := recordingModel{Model: scripted, fn: func(llm.Request) {
		if !first {
			return
		}
		first = false
		// The server gains a tool after the first request was built.
		changed := client.Changed()
		sdk.AddTool(srv, &sdk.Tool{Name: "radar", Description: "Show the rain radar of a city"},
			func(_ context.Context, _ *sdk.CallToolRequest, p struct {
				City string `json:"city"`
			}) (*sdk.CallToolResult, any, error) {
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "rain over " + p.City}}}, nil, nil
			})
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Error("the catalog did not change within 10 s of the server's new tool")
		}
	}}
	n := nodetest.Start(t, node.Config{Tools: []tools.Tool{tools.Calculator{}}, ToolCatalog: client, Disclosure: disclosure.Catalog, Model: model})
	events := nodetest.Run(t, n, "mcp-catalog", "radar for Bergen?")
	sections, names, system := rec.get()
	if len(names) != 3 || names[0] != "calculator,load_tools" || names[1] != "calculator,load_tools,wx__alerts,wx__forecast,wx__radar" || names[2] != names[1] {
		t.Fatalf("requests offered %v", names)
	}
	if !strings.Contains(system[0], "- mcp:wx (2 tools): wx__alerts, wx__forecast") || !strings.Contains(system[1], "- mcp:wx (3 tools): wx__alerts, wx__forecast, wx__radar") {
		t.Errorf("system prompts:\n%s\n---\n%s", system[0], system[1])
	}
	if sections[2] != sections[1] || system[2] != system[1] {
		t.Error("the prompt changed between the two requests after the load")
	}
	if r := toolResults(t, events)["r1"]; r.Error != "" || r.Result != "rain over Bergen" {
		t.Errorf("wx__radar = %+v", r)
	}
}
