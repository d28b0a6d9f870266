package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// gateNode is a Node whose one tool, "gate", answers once release is closed.
type gateNode struct {
	started chan struct{}
	release chan struct{}
}

func (g *gateNode) ToolSpecs() []messages.ToolSpec {
	return []messages.ToolSpec{{Name: "gate", Description: "waits for the test", Parameters: json.RawMessage(`{"type":"object"}`)}}
}

func (g *gateNode) CallTool(ctx context.Context, _, _, _ string) (string, error) {
	g.started <- struct{}{}
	select {
	case <-g.release:
		return "opened", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (g *gateNode) RunTask(context.Context, node.Task) (messages.TaskResult, error) {
	return messages.TaskResult{}, errors.New("no tasks here")
}

// A batch over stdio that reuses the ID of a request still in flight gets an
// error for that request, and the session goes on: the rest of the batch, the
// request in flight and the requests after it are answered.
func TestServerStdioBatchReusesAnOpenID(t *testing.T) {
	g := &gateNode{started: make(chan struct{}, 1), release: make(chan struct{})}
	srv := mcp.NewServer(g, mcp.ServerOptions{})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- srv.Serve(ctx, mcp.LineTransport(inR, outW, 0))
		outW.Close()
	}()
	lines := linesOf(outR, 16)
	send := func(s string) {
		t.Helper()
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	next := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the server's output ended: %v", <-served)
			}
			return l
		case <-time.After(20 * time.Second):
			t.Fatal("no answer within 20 s")
		}
		return ""
	}
	// 2025-03-26 is the last protocol version with batches.
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if l := next(); !strings.Contains(l, `"id":1`) || !strings.Contains(l, `"result"`) {
		t.Fatalf("initialize: %s", l)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`[{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"gate","arguments":{}}}]`)
	select {
	case <-g.started:
	case <-time.After(20 * time.Second):
		t.Fatalf("the call of gate did not start: %s", next())
	}
	send(`[{"jsonrpc":"2.0","id":5,"method":"ping"},{"jsonrpc":"2.0","id":6,"method":"ping"}]`)
	var gotErr, gotSix bool
	for !gotErr || !gotSix {
		l := next()
		switch {
		case strings.Contains(l, `"error"`) && strings.Contains(l, "-32600") && strings.Contains(l, "5"):
			gotErr = true
		case strings.Contains(l, `"id":6`) && strings.Contains(l, `"result"`):
			gotSix = true
		default:
			t.Fatalf("unexpected line: %s", l)
		}
	}
	close(g.release)
	if l := next(); !strings.Contains(l, `"id":5`) || !strings.Contains(l, "opened") {
		t.Fatalf("the call in flight: %s", l)
	}
	send(`{"jsonrpc":"2.0","id":7,"method":"ping"}`)
	if l := next(); !strings.Contains(l, `"id":7`) || !strings.Contains(l, `"result"`) {
		t.Fatalf("ping after: %s", l)
	}
	inW.Close()
	select {
	case err := <-served:
		if err != nil && !errors.Is(err, io.EOF) {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("Serve did not return after stdin closed")
	}
}
