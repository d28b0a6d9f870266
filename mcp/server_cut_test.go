package mcp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/tools"
)

// crash stops r's node as a crash would, for its clients: their connections
// drop, and it answers nothing more (its answers go nowhere); then a node over
// the same log serves, with model m.
func (r *restartable) crash(m *holdModel) {
	r.t.Helper()
	// Until the next node serves, a request's connection drops unanswered, as
	// one to a crashed process's port would: a 503 in its place (a proxy's) made
	// the Go SDK client fail its connection whenever the next node took longer
	// to start than the client's retry (the race detector on a busy machine).
	var down http.Handler = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler)
	})
	r.backend.Store(&down)
	r.hs.CloseClientConnections()
	_ = r.n.Close()
	r.stop()
	r.start(m)
}

// Across a stop or a crash of the node, a call of task_result answers with its
// task's result, as run_task's does (the node that serves next answers the
// resumed stream); a call of another tool, whose outcome the node cannot know,
// answers a JSON-RPC error that says it was cut off, rather than a transport
// error or nothing.
func TestServerHTTPToolCallsCutByRestart(t *testing.T) {
	for _, how := range []string{"stop", "crash"} {
		t.Run(how, func(t *testing.T) {
			block := blockTool{started: make(chan error, 4), causes: make(chan error, 4)}
			// The client tries to resume its streams twice, this far apart: the
			// restart must fit in, and under the race detector on a loaded machine it
			// took more than 200 ms (the client then got the 503 of the crash).
			r := &restartable{t: t, dir: t.TempDir(), opts: mcp.ServerOptions{ReconnectDelay: time.Second}, tools: []tools.Tool{block}}
			r.hs = newBackendServer(t, r)
			first := newHoldModel(false)
			r.start(first)
			t.Cleanup(func() { r.stop() })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cs := r.connect(ctx, nil)
			type answer struct {
				res *sdk.CallToolResult
				err error
			}
			call := func(name string, args map[string]any) chan answer {
				c := make(chan answer, 1)
				go func() {
					res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
					c <- answer{res, err}
				}()
				return c
			}
			blocked := call("block", map[string]any{})
			ran := call("run_task", map[string]any{"input": "cut", "session_id": "s-cut"})
			select {
			case <-block.started:
			case <-ctx.Done():
				t.Fatal("the tool was never called")
			}
			select {
			case <-first.asked:
			case <-ctx.Done():
				t.Fatal("the model was never asked")
			}
			waited := call("task_result", map[string]any{"session_id": "s-cut"})
			// The calls are recorded in the session's stream before they run.
			for {
				events, err := r.n.Log().Read(ctx, eventlog.MCPSessionStreamPrefix+cs.ID(), 1)
				if err != nil {
					t.Fatal(err)
				}
				if len(events) >= 3 {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("%d calls recorded, want 3", len(events))
				case <-time.After(10 * time.Millisecond):
				}
			}
			if how == "stop" {
				r.restart(newHoldModel(true))
			} else {
				r.crash(newHoldModel(true))
			}
			for name, c := range map[string]chan answer{"run_task": ran, "task_result": waited} {
				select {
				case a := <-c:
					if a.err != nil || a.res.IsError || textOf(a.res) != "held: cut" {
						t.Errorf("%s across the %s: %v %+v", name, how, a.err, a.res)
					}
				case <-ctx.Done():
					t.Fatalf("%s did not answer after the %s", name, how)
				}
			}
			select {
			case a := <-blocked:
				var rpcErr *jsonrpc.Error
				if !errors.As(a.err, &rpcErr) || rpcErr.Code != -32000 || !strings.Contains(rpcErr.Message, "cut off") {
					t.Errorf("the call of block across the %s: %v %+v, want a JSON-RPC error -32000 that says it was cut off", how, a.err, a.res)
				}
			case <-ctx.Done():
				t.Fatalf("the call of block did not answer after the %s", how)
			}
		})
	}
}

// A client that deletes its session while a call of it is withheld because the node
// stops (its answer is the next node's) ends the call: the DELETE is answered, and
// the HTTP server can shut down. Before, the withheld call waited for its stream to
// be cut, the SDK's close of the session waited for the call, and the DELETE, and
// the server's Close behind it, hung.
func TestServerDeleteEndsACallWithheldAsTheNodeStops(t *testing.T) {
	r := &restartable{t: t, dir: t.TempDir(), opts: mcp.ServerOptions{ReconnectDelay: time.Second}}
	r.hs = newBackendServer(t, r)
	held := newHoldModel(false)
	r.start(held)
	t.Cleanup(func() { r.stop() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := r.connect(ctx, nil)
	go func() {
		_, _ = cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_task", Arguments: map[string]any{"input": "cut", "session_id": "s-delete"}})
	}()
	select {
	case <-held.asked:
	case <-ctx.Done():
		t.Fatal("the model was never asked")
	}
	r.stop() // run_task's answer is withheld: the node stops
	deleted := make(chan error, 1)
	go func() { deleted <- cs.Close() }()
	select {
	case <-deleted:
	case <-time.After(30 * time.Second):
		t.Fatal("the client's DELETE of its session did not return: it waits for the withheld call")
	}
}

// A GET that resumes a call's stream (Last-Event-ID) and reaches a node that
// stops (CloseStreams: its HTTP server has not closed yet, or a proxy sends it
// there) is answered with the client's last event ID again and the retry, so
// that the client tries again, from the node that serves next. Before, it was
// answered with an empty stream, which the Go SDK takes for the call's end:
// "request terminated without response".
func TestServerHTTPResumeOnAStoppingNodeRetries(t *testing.T) {
	r := newRestartable(t, mcp.ServerOptions{ReconnectDelay: time.Second}, newHoldModel(true))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := r.connect(ctx, nil)
	r.stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.hs.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	req.Header.Set("Last-Event-ID", "ABCDEF_3")
	resp, err := freshConns.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "id: ABCDEF_3\n") || !strings.Contains(string(body), "retry: 1000\n") {
		t.Fatalf("a resumption on a stopping node: %s %q, want the last event ID again and the retry", resp.Status, body)
	}
}
