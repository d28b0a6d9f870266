package mcp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// waitingServer is a go-sdk server whose tool "wait" runs until its request is
// cancelled: the connection stays open, so only a notifications/cancelled for the
// request ends its context. Each call's key arrives on started, and the end of its
// context on cancelled.
func waitingServer() (srv *sdk.Server, started chan string, cancelled chan struct{}) {
	started, cancelled = make(chan string, 4), make(chan struct{}, 4)
	srv = sdk.NewServer(&sdk.Implementation{Name: "slow", Version: "1"}, nil)
	sdk.AddTool(srv, &sdk.Tool{Name: "wait", Description: "Waits until cancelled"},
		func(ctx context.Context, r *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
			key, _ := r.Params.Meta["troupe/idempotency_key"].(string)
			started <- key
			<-ctx.Done()
			cancelled <- struct{}{}
			return nil, nil, ctx.Err()
		})
	return srv, started, cancelled
}

// Cancelling a task that waits on an MCP server's tool tells the server, as the MCP
// specification's cancellation says (notifications/cancelled for the request): the
// server's handler sees its context end, and the task ends cancelled with no result
// recorded for the call.
func TestCancelledTaskCancelsTheMCPServersCall(t *testing.T) {
	upstream, started, cancelled := waitingServer()
	c := startClient(t, map[string]mcp.ServerConfig{"slow": {Transport: mcp.InProcess(upstream)}}, nil)
	model, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "slow__wait", Arguments: "{}"}}},
		{Content: "unreachable"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{ToolCatalog: c, Model: model})
	if _, err := n.Submit(context.Background(), node.Task{Input: "wait", SessionID: "mcp-cancel"}); err != nil {
		t.Fatal(err)
	}
	select {
	case key := <-started:
		// The key a server is given is the call's name outside the log
		// (messages.EffectKey.Outward), not the log's own key (mcp-cancel/4).
		if !strings.HasPrefix(key, "troupe-") || len(key) != len("troupe-")+32 {
			t.Errorf("the server got the call with key %q, want the call's outward name (troupe- and 32 hex digits)", key)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server's tool was never called")
	}
	if err := n.Cancel(context.Background(), "mcp-cancel", "enough"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the MCP server's call was not cancelled within 10 s of the task's cancellation")
	}
	var events []messages.Envelope
	waitFor(t, 30*time.Second, "the task ended cancelled", func() bool {
		events, _ = n.Log().Read(context.Background(), "mcp-cancel", 1)
		if len(events) == 0 || events[len(events)-1].Type != messages.TypeTaskFailed {
			return false
		}
		p, err := events[len(events)-1].Decode()
		return err == nil && p.(*messages.TaskFailed).Reason == messages.ReasonCancelled
	})
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted {
			t.Errorf("the cancelled call's end was recorded: %s", e.Payload)
		}
	}
}
