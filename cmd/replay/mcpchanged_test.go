package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// A session recorded under the catalog disclosure, whose system prompt names an MCP
// server's tools, diverges at its first request once the server has another tool:
// verify says why it may, rather than printing two prompt hashes that differ with
// no word of the servers it connected to (a user took it for a nondeterminism).
func TestVerifyHintsThatAnMCPServersToolsChanged(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	srv := sdk.NewServer(&sdk.Implementation{Name: "loud", Version: "1"}, nil)
	type in struct {
		Text string `json:"text"`
	}
	answer := func(_ context.Context, _ *sdk.CallToolRequest, a in) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.ToUpper(a.Text)}}}, nil, nil
	}
	sdk.AddTool(srv, &sdk.Tool{Name: "shout", Description: "Shouts the text"}, answer)
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	defer hs.Close()
	dir := t.TempDir()
	data, cfgPath := filepath.Join(dir, "data"), filepath.Join(dir, "troupe.json")
	writeFiles(t, dir, map[string]string{"troupe.json": `{"disclosure": "catalog", "mcp_servers": {"loud": {"url": "` + hs.URL + `"}}}`})

	client, err := mcp.NewClient(mcp.ClientConfig{Servers: map[string]mcp.ServerConfig{"loud": {URL: hs.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- client.Run(ctx) }()
	if err := client.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "load_tools", Arguments: `{"group":"mcp:loud"}`}}},
		{Content: "loaded"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	recordRun(ctx, t, node.Config{DataDir: data, Model: model, ToolCatalog: client, Disclosure: disclosure.Catalog}, "mcp", "load the tools")
	client.Close()
	<-done
	if code, out, errs := replay(t, "verify", "mcp", "--data", data, "--config", cfgPath); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify --config: exit %d\n%s%s", code, out, errs)
	}

	sdk.AddTool(srv, &sdk.Tool{Name: "whisper", Description: "Whispers the text"}, answer)
	code, out, errs := replay(t, "verify", "mcp", "--data", data, "--config", cfgPath)
	if code != 1 || !strings.Contains(out, "diverges at seq 2") {
		t.Fatalf("verify after the server gained a tool: exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(errs, "hint:") || !strings.Contains(errs, `MCP server "loud"`) {
		t.Errorf("verify gives no hint of the MCP server whose tools changed:\n%s", errs)
	}
}
