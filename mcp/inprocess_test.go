package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/tools"
)

// A server in the same process is reached through ServerConfig.Transport: its tools
// join the catalog and are called like any server's.
func TestInProcessServer(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "inproc", Version: "1"}, nil)
	type in struct {
		Text string `json:"text"`
	}
	sdk.AddTool(srv, &sdk.Tool{Name: "shout", Description: "Shouts the text"},
		func(_ context.Context, _ *sdk.CallToolRequest, a in) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.ToUpper(a.Text)}}}, nil, nil
		})
	bad := mcp.ServerConfig{Transport: mcp.InProcess(srv), URL: "http://localhost:1/mcp"}
	if err := bad.Validate("x"); err == nil || !strings.Contains(err.Error(), "in-process") {
		t.Errorf("a transport and a url: %v", err)
	}
	c, err := mcp.NewClient(mcp.ClientConfig{Servers: map[string]mcp.ServerConfig{"loud": {Transport: mcp.InProcess(srv)}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { c.Close(); <-done }()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if st := c.Status(); st[0].Transport != "in-process" || st[0].State != mcp.StateConnected {
		t.Fatalf("status = %+v", st)
	}
	tl, ok := c.Tool("loud__shout")
	if !ok {
		t.Fatalf("catalog = %v", c.Specs())
	}
	if out, err := tl.Call(ctx, tools.Call{Key: "s/1", Arguments: `{"text":"hi"}`}); err != nil || out != "HI" {
		t.Errorf("call = %q, %v", out, err)
	}
}

// Servers that connect at once each rebuild the catalog from every server's tools:
// a rebuild that read the servers before another server's list must not replace that
// server's later, fuller rebuild, or the catalog lacks its tools until its list
// changes again.
func TestServersConnectingAtOnceAllJoinTheCatalog(t *testing.T) {
	const servers, each = 24, 40
	for round := range 5 {
		cfg := map[string]mcp.ServerConfig{}
		for i := range servers {
			srv := sdk.NewServer(&sdk.Implementation{Name: fmt.Sprintf("s%d", i), Version: "1"}, nil)
			for j := range each {
				srv.AddTool(&sdk.Tool{Name: fmt.Sprintf("tool_%d", j), Description: "Does a thing",
					InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`)},
					func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
						return &sdk.CallToolResult{}, nil
					})
			}
			cfg[fmt.Sprintf("s%d", i)] = mcp.ServerConfig{Transport: mcp.InProcess(srv)}
		}
		c := startClient(t, cfg, nil)
		if got := len(c.Specs()); got != servers*each {
			missing := map[string]bool{}
			for _, st := range c.Status() {
				missing[st.Name] = true
			}
			for _, s := range c.Specs() {
				name, _, _ := strings.Cut(s.Name, mcp.Separator)
				delete(missing, name)
			}
			t.Fatalf("round %d: the catalog has %d tools, want %d; servers missing: %v", round, got, servers*each, slices.Sorted(maps.Keys(missing)))
		}
	}
}
