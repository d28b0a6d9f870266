package mcp_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// panicNode is a Node whose tool "boom" panics and whose tool "fine" answers.
type panicNode struct{}

func (panicNode) ToolSpecs() []messages.ToolSpec {
	return []messages.ToolSpec{
		{Name: "boom", Description: "panics", Parameters: json.RawMessage(`{"type":"object"}`)},
		{Name: "fine", Description: "answers", Parameters: json.RawMessage(`{"type":"object"}`)},
	}
}

func (panicNode) CallTool(_ context.Context, _, name, _ string) (string, error) {
	if name == "boom" {
		panic("a bug in a tool")
	}
	return "ok", nil
}

func (panicNode) RunTask(context.Context, node.Task) (messages.TaskResult, error) {
	panic("a bug in a task's run")
}

// A request whose handling panics is answered with an internal error, and the
// server goes on serving: the SDK runs each handler on a goroutine of its own
// without a recover, so before, one such request ended the whole process (this
// test binary with it).
func TestServerHTTPPanickingHandlerIsAnsweredAndTheServerGoesOn(t *testing.T) {
	srv := mcp.NewServer(panicNode{}, mcp.ServerOptions{})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "panics", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, name := range []string{"boom", mcp.RunTask} {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: map[string]any{"input": "x"}})
		if err == nil && (res == nil || !res.IsError) {
			t.Fatalf("%s: answered %+v, want an error", name, res)
		}
		if err != nil && !strings.Contains(err.Error(), "internal error") {
			t.Errorf("%s: %v, want it to say an internal error", name, err)
		}
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "fine", Arguments: map[string]any{}})
	if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].(*sdk.TextContent).Text != "ok" {
		t.Fatalf("fine after the panics: %+v, %v", res, err)
	}
}
