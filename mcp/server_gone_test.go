package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// hangNode is a Node whose tool "hang" and whose tasks run until their context
// ends, as a task waiting for an approval with no timeout does; it counts the
// calls under way.
type hangNode struct {
	started chan struct{}
	running atomic.Int64
	// tasksGoOn counts the tasks whose call ended with node.ErrCallerGone: the
	// task is not cancelled.
	tasksGoOn atomic.Int64
}

func (h *hangNode) ToolSpecs() []messages.ToolSpec {
	return []messages.ToolSpec{{Name: "hang", Description: "runs until cancelled", Parameters: json.RawMessage(`{"type":"object"}`)}}
}

func (h *hangNode) hang(ctx context.Context) error {
	h.running.Add(1)
	defer h.running.Add(-1)
	h.started <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

func (h *hangNode) CallTool(ctx context.Context, _, _, _ string) (string, error) {
	return "", h.hang(ctx)
}

func (h *hangNode) RunTask(ctx context.Context, _ node.Task) (messages.TaskResult, error) {
	err := h.hang(ctx)
	if errors.Is(context.Cause(ctx), node.ErrCallerGone) {
		h.tasksGoOn.Add(1)
	}
	return messages.TaskResult{}, err
}

// mcpPost posts one JSON-RPC message to the server at url in session sid (none:
// ""), and returns the session the answer names. With ctx cancelled, the
// connection is dropped: the client goes away without a word.
func mcpPost(ctx context.Context, url, sid string, msg any) (string, error) {
	body, err := json.Marshal(msg)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil && ctx.Err() == nil {
		return "", err
	}
	return resp.Header.Get("Mcp-Session-Id"), nil
}

// A client that calls a tool or run_task and goes away without a word (no
// DELETE, no cancellation, no stream of notifications that would answer the
// session's pings) loses its session after SessionTimeout, and the calls it left
// running end with it (a task is not cancelled: its caller is gone, as after a
// restart of the node, node.ErrCallerGone). Before, the SDK's close of the session waited for them
// without cancelling them: a call whose task ran on (one waiting for an approval
// with no timeout) kept its goroutines and its session for as long as the task
// ran, for every client that ever went away so.
func TestServerHTTPCallsEndWithTheirSession(t *testing.T) {
	h := &hangNode{started: make(chan struct{}, 16)}
	srv := mcp.NewServer(h, mcp.ServerOptions{SessionTimeout: 600 * time.Millisecond, ProgressInterval: 50 * time.Millisecond})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const clients = 6
	for i := range clients {
		sid, err := mcpPost(ctx, hs.URL, "", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
			"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "gone", "version": "1"}}})
		if err != nil || sid == "" {
			t.Fatalf("initialize: session %q, %v", sid, err)
		}
		if _, err := mcpPost(ctx, hs.URL, sid, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}); err != nil {
			t.Fatal(err)
		}
		call := map[string]any{"name": "hang", "arguments": map[string]any{}}
		if i%2 == 1 {
			call = map[string]any{"name": mcp.RunTask, "arguments": map[string]any{"input": "wait"}}
		}
		callCtx, drop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := mcpPost(callCtx, hs.URL, sid, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
			done <- err
		}()
		select {
		case <-h.started:
		case <-ctx.Done():
			t.Fatal("the call never started")
		}
		drop() // the client goes away
		<-done
	}
	for h.running.Load() > 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d calls still run after their clients' sessions timed out", h.running.Load(), clients)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if got := h.tasksGoOn.Load(); got != clients/2 {
		t.Errorf("%d of the %d run_task calls ended with node.ErrCallerGone, which leaves their task running; want all", got, clients/2)
	}
}
