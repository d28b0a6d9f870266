package main

import (
	"context"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
)

// node agents list expands mcp:SERVER to the tools the server offers now, and
// only that server's.
func TestExpandToolsOfAnMCPServer(t *testing.T) {
	server := func(name string, toolNames ...string) *sdk.Server {
		srv := sdk.NewServer(&sdk.Implementation{Name: name, Version: "1"}, nil)
		for _, tn := range toolNames {
			sdk.AddTool(srv, &sdk.Tool{Name: tn, Description: "The " + tn + " tool"},
				func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
					return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "ok"}}}, nil, nil
				})
		}
		return srv
	}
	c, err := mcp.NewClient(mcp.ClientConfig{Servers: map[string]mcp.ServerConfig{
		"wx":    {Transport: mcp.InProcess(server("wx", "forecast", "alerts"))},
		"other": {Transport: mcp.InProcess(server("other", "ping"))},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); c.Close(); <-done }()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := c.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	got := expandTools([]string{"clock", "mcp:wx", "calculator"}, node.Config{ToolCatalog: c})
	if strings.Join(got, ",") != "calculator,clock,wx__alerts,wx__forecast" {
		t.Errorf("expanded = %v", got)
	}
	if got := expandTools(nil, node.Config{ToolCatalog: c}); got != nil {
		t.Errorf("nil entries (every tool) expanded to %v", got)
	}
}
