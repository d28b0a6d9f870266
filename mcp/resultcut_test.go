package mcp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/tools"
)

// A server's result over MaxResultBytes reaches the model as the client cuts it,
// under the limits a session calls the tool with (tools.CallLimited): its head of
// MaxResultBytes and a note giving the result's true length, for a result and for
// an isError text alike; not cut again at the 64 KiB default of a tool's output,
// with a note that takes the cut text's length for the result's.
func TestServerResultIsCutOnceAtMaxResultBytes(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "big", Version: "1"}, nil)
	text := strings.Repeat("z", 1<<20)
	sdk.AddTool(srv, &sdk.Tool{Name: "dump"}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}, nil, nil
	})
	sdk.AddTool(srv, &sdk.Tool{Name: "fail"}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: text}}}, nil, nil
	})
	c, ctx := runServer(t, srv)
	const note = "\n[cut: the result is 1048576 bytes; the first 262144 are shown]"
	dump, _ := c.Tool("s__dump")
	out, err := tools.CallLimited(ctx, dump, "s__dump", tools.Call{Key: "s/1"})
	if err != nil || out != text[:256<<10]+note {
		t.Errorf("dump: %d bytes ending %q, %v", len(out), out[max(0, len(out)-80):], err)
	}
	fail, _ := c.Tool("s__fail")
	_, err = tools.CallLimited(ctx, fail, "s__fail", tools.Call{Key: "s/2"})
	if err == nil || !strings.HasSuffix(err.Error(), text[:256<<10]+note) {
		t.Errorf("fail: %v", err)
	}
}

// runServer runs a client of srv, in this process, as server "s", ready, until the
// test ends; ctx bounds the test's calls (10 s).
func runServer(t *testing.T, srv *sdk.Server) (*mcp.Client, context.Context) {
	t.Helper()
	c, err := mcp.NewClient(mcp.ClientConfig{Servers: map[string]mcp.ServerConfig{"s": {Transport: mcp.InProcess(srv)}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { c.Close(); <-done; cancel() })
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return c, ctx
}
