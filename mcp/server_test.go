package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// blockTool waits for its context to end and reports why; countTool counts its calls.
type blockTool struct{ started, causes chan error }

func (blockTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "block", Description: "waits", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (b blockTool) Call(ctx context.Context, _ tools.Call) (string, error) {
	b.started <- nil
	<-ctx.Done()
	b.causes <- context.Cause(ctx)
	return "", ctx.Err()
}

type countTool struct{ calls *atomic.Int32 }

func (countTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "count", Description: "counts its calls", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (c countTool) Call(context.Context, tools.Call) (string, error) {
	return "call " + string(rune('0'+c.calls.Add(1))), nil
}

// connect serves srv to an SDK client over in-memory transports until the test ends.
func connect(t *testing.T, srv *mcp.Server, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	st, ct := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, st) }()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		cancel()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return within 10 s")
		}
	})
	return cs
}

func toolNames(t *testing.T, cs *sdk.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var n []string
	for _, tl := range res.Tools {
		n = append(n, tl.Name)
	}
	slices.Sort(n)
	return n
}

func textOf(r *sdk.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func answerScript(t *testing.T, answer string) llm.Model {
	t.Helper()
	m, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}},
		{Content: answer},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestServerServesTheNodesTools(t *testing.T) {
	block := blockTool{started: make(chan error, 1), causes: make(chan error, 1)}
	var calls atomic.Int32
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "forty-two"),
		Tools: []tools.Tool{tools.Calculator{}, tools.NewClock(nil), block, countTool{&calls}}})
	cs := connect(t, mcp.NewServer(n, mcp.ServerOptions{}), nil)
	ctx := context.Background()

	if got := strings.Join(toolNames(t, cs), " "); got != "block calculator clock count run_task task_result" {
		t.Fatalf("tools %s", got)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "calculator", Arguments: map[string]any{"expression": "6*7"}})
	if err != nil || res.IsError || textOf(res) != "42" {
		t.Fatalf("calculator: %v %+v %q", err, res, textOf(res))
	}
	// The tool's argument error comes back as a tool error the caller can read.
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "calculator", Arguments: map[string]any{"expr": "1"}})
	if err != nil || !res.IsError || !strings.Contains(textOf(res), "invalid arguments") {
		t.Fatalf("calculator with a wrong field: %v %q", err, textOf(res))
	}
	// A key in _meta makes a second call an answer from the node's memory.
	for range 2 {
		res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "count", Meta: sdk.Meta{mcp.IdempotencyKeyMeta: "caller-session/7"}})
		if err != nil || textOf(res) != "call 1" {
			t.Fatalf("count: %v %q", err, textOf(res))
		}
	}
	if res, _ = cs.CallTool(ctx, &sdk.CallToolParams{Name: "count"}); textOf(res) != "call 2" {
		t.Errorf("count without a key answered %q, want a new call", textOf(res))
	}
	// A cancelled request cancels the tool's context.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: "block"}); done <- err }()
	select {
	case <-block.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not reach the tool within 10 s")
	}
	cancel()
	select {
	case cause := <-block.causes:
		if !errors.Is(cause, actors.ErrEffectCancelled) {
			t.Errorf("the tool's context ended with %v, want actors.ErrEffectCancelled", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the tool's context was not cancelled within 10 s of the request's")
	}
	<-done

	// run_task runs the agent and answers its output, with the session in _meta.
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_task", Arguments: map[string]any{"input": "what is 6*7?", "session_id": "mcp-task-1"}})
	if err != nil || res.IsError || textOf(res) != "forty-two" || res.Meta[mcp.SessionIDMeta] != "mcp-task-1" {
		t.Fatalf("run_task: %v %+v %q", err, res, textOf(res))
	}
	for _, bad := range []map[string]any{{"input": ""}, {"input": "x", "agent": "nobody"}, {"input": "x", "extra": 1}, {}} {
		res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_task", Arguments: bad})
		if err != nil || !res.IsError || textOf(res) == "" {
			t.Errorf("run_task %v: %v %q, want a tool error with the reason", bad, err, textOf(res))
		}
	}
}

// run_task answers a failed task as a tool error with the reason.
func TestServerRunTaskFailed(t *testing.T) {
	m, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "clock", Arguments: `{}`}}}}})
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{Model: m, MaxSteps: 1})
	cs := connect(t, mcp.NewServer(n, mcp.ServerOptions{}), nil)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "run_task", Arguments: map[string]any{"input": "loop"}})
	if err != nil || !res.IsError || !strings.Contains(textOf(res), "the task failed") || !strings.Contains(textOf(res), "reason max_steps") || res.Meta[mcp.SessionIDMeta] == nil {
		t.Fatalf("run_task: %v %+v %q", err, res, textOf(res))
	}
	// A token budget of 1: the first reply's tokens use it up.
	res, err = cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "run_task", Arguments: map[string]any{"input": "loop", "max_tokens": 1}})
	if err != nil || !res.IsError || !strings.Contains(textOf(res), "reason token_budget") || !strings.Contains(textOf(res), "its budget is 1") {
		t.Fatalf("run_task with max_tokens 1: %v %q", err, textOf(res))
	}
	res, err = cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "run_task", Arguments: map[string]any{"input": "loop", "max_tokens": -1}})
	if err != nil || !res.IsError || !strings.Contains(textOf(res), "max_tokens must be between 0 and") {
		t.Fatalf("run_task with max_tokens -1: %v %q", err, textOf(res))
	}
	// A cost budget reaches the task (the schema has it); out of range, it is refused.
	res, err = cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "run_task", Arguments: map[string]any{"input": "loop", "max_cost_usd": 2e6}})
	if err != nil || !res.IsError || !strings.Contains(textOf(res), "max_cost_usd must be between 0 and") {
		t.Fatalf("run_task with max_cost_usd 2e6: %v %q", err, textOf(res))
	}
}

// The server follows the node's catalog: an MCP server behind the node that adds a
// tool reaches the node's own MCP clients as notifications/tools/list_changed.
func TestServerFollowsTheCatalog(t *testing.T) {
	c := startClient(t, map[string]mcp.ServerConfig{"hostile": testServer(t, "hostile")}, nil)
	n := nodetest.Start(t, node.Config{ToolCatalog: c})
	srv := mcp.NewServer(n, mcp.ServerOptions{Changed: c.Changed})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Run(ctx)
	changed := make(chan struct{}, 16)
	cs := connect(t, srv, &sdk.ClientOptions{ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { changed <- struct{}{} }})
	if got := toolNames(t, cs); !slices.Contains(got, "hostile__grow") || slices.Contains(got, "hostile__extra") {
		t.Fatalf("tools %v", got)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "hostile__grow"})
	if err != nil || textOf(res) != "grown" {
		t.Fatalf("grow: %v %q", err, textOf(res))
	}
	waitFor(t, 10*time.Second, "hostile__extra offered", func() bool {
		select {
		case <-changed:
		case <-time.After(100 * time.Millisecond):
		}
		return slices.Contains(toolNames(t, cs), "hostile__extra")
	})
}

// /mcp on the node's HTTP API serves the same over Streamable HTTP.
func TestServerOverHTTP(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "over http")})
	srv := mcp.NewServer(n, mcp.ServerOptions{})
	n.Handle("/mcp", srv.Handler())
	hs := httptest.NewServer(n.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got := strings.Join(toolNames(t, cs), " "); got != "calculator clock run_task task_result" {
		t.Fatalf("tools %s", got)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_task", Arguments: map[string]any{"input": "hello"}})
	if err != nil || res.IsError || textOf(res) != "over http" {
		t.Fatalf("run_task: %v %q", err, textOf(res))
	}
}

// A wrong type in run_task's arguments is named by its field and JSON types.
func TestServerRunTaskWrongType(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused")})
	cs := connect(t, mcp.NewServer(n, mcp.ServerOptions{}), nil)
	for args, want := range map[string]string{
		`{"input": 42}`:                    `field "input" must be a string, not a JSON number`,
		`{"input": "x", "max_tokens": []}`: `field "max_tokens" must be an integer, not a JSON array`,
	} {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "run_task", Arguments: json.RawMessage(args)})
		if err != nil || !res.IsError || !strings.Contains(textOf(res), want) {
			t.Errorf("run_task %s: %v %q, want a tool error saying %q", args, err, textOf(res), want)
		}
	}
}

// A request to /mcp larger than the server takes is answered 413 with a JSON-RPC
// error that says so (an SDK shows it), not with plain text.
func TestServerHTTPTooLarge(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused")})
	hs := httptest.NewServer(mcp.NewServer(n, mcp.ServerOptions{}).Handler())
	defer hs.Close()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_task","arguments":{"input":"` +
		strings.Repeat("x", int(mcp.MaxRequestBytes)) + `"}}}`
	req, err := http.NewRequest("POST", hs.URL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rpc struct {
		Error struct {
			Code    int
			Message string
		}
	}
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
		json.Unmarshal(raw, &rpc) != nil || rpc.Error.Code != -32600 || !strings.Contains(rpc.Error.Message, "larger than") {
		t.Fatalf("%s %s: %q", resp.Status, resp.Header.Get("Content-Type"), raw)
	}
}

// CloseStreams ends the clients' streams of notifications, so that the HTTP
// server's Shutdown does not wait for a connected client to hang up.
func TestServerCloseStreams(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused")})
	srv := mcp.NewServer(n, mcp.ServerOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler()}
	closeUnused(hs)
	go hs.Serve(ln)
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A protocol with sessions, whose client opens a stream of notifications (from
	// 2026-07-28 on there is none).
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: "http://" + ln.Addr().String(), MaxRetries: -1}, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	toolNames(t, cs) // the client's stream of notifications is open by now
	srv.CloseStreams()
	shutCtx, shutCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer shutCancel()
	if err := hs.Shutdown(shutCtx); err != nil {
		t.Fatalf("Shutdown with a client connected: %v", err)
	}
}

// closeUnused makes hs close, when it shuts down, the connections that no request
// came on yet. A client's transport may dial a connection that it then leaves
// unused (the request it dialed for went on a connection that freed up first), and
// Shutdown waits for such a connection until it is 5 s old (net/http treats a new
// connection as idle only then, Go issue 22682): about 1 run in 250 of
// TestServerCloseStreams did, under load.
func closeUnused(hs *http.Server) {
	var mu sync.Mutex
	fresh := map[net.Conn]bool{}
	hs.ConnState = func(c net.Conn, st http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		if st == http.StateNew {
			fresh[c] = true
		} else {
			delete(fresh, c)
		}
	}
	hs.RegisterOnShutdown(func() {
		mu.Lock()
		defer mu.Unlock()
		for c := range fresh {
			c.Close()
		}
	})
}

// A client's session goes on when its node restarts or its requests move to
// another node (behind a load balancer): the node it reaches now does not know its
// session, and resumes it under the client's ID rather than answer 404 (which the
// SDKs do not recover from).
func TestServerHTTPSessionMoves(t *testing.T) {
	var backend atomic.Pointer[http.Handler]
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*backend.Load()).ServeHTTP(w, r) }))
	defer hs.Close()
	serve := func(answer string) *mcp.Server {
		n := nodetest.Start(t, node.Config{Model: answerScript(t, answer)})
		srv := mcp.NewServer(n, mcp.ServerOptions{})
		h := srv.Handler()
		backend.Store(&h)
		return srv
	}
	first := serve("on the first node")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A protocol with sessions (from 2026-07-28 on there are none).
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL},
		&sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if cs.ID() == "" || cs.InitializeResult().ProtocolVersion != "2025-11-25" {
		t.Fatalf("session %q, protocol %s", cs.ID(), cs.InitializeResult().ProtocolVersion)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_task", Arguments: map[string]any{"input": "hello"}})
	if err != nil {
		t.Fatalf("run_task: %v", err)
	}
	if res.IsError || textOf(res) != "on the first node" {
		t.Fatalf("run_task: %v %q", err, textOf(res))
	}
	id := cs.ID()
	serve("on the second node")
	first.CloseStreams() // the first node goes away: the client's stream of notifications ends
	// Calls at once: the first to arrive resumes the session, the others join it.
	errs := make(chan error, 8)
	for i := range cap(errs) {
		go func() {
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "calculator", Arguments: map[string]any{"expression": fmt.Sprintf("6*%d", i)}})
			switch {
			case err != nil:
				errs <- err
			case res.IsError || textOf(res) != strconv.Itoa(6*i):
				errs <- fmt.Errorf("6*%d: %q", i, textOf(res))
			default:
				errs <- nil
			}
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Errorf("calculator on the second node: %v", err)
		}
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_task", Arguments: map[string]any{"input": "hello again"}})
	if err != nil {
		t.Fatalf("run_task on the second node: %v", err)
	}
	if res.IsError || textOf(res) != "on the second node" {
		t.Fatalf("run_task on the second node: %v %q", err, textOf(res))
	}
	if got := strings.Join(toolNames(t, cs), " "); got != "calculator clock run_task task_result" {
		t.Fatalf("tools on the second node: %s", got)
	}
	if cs.ID() != id {
		t.Errorf("the session's ID changed from %q to %q", id, cs.ID())
	}
}

// A body that is not JSON is answered with JSON-RPC's parse error, JSON that is no
// JSON-RPC 2.0 message with its invalid request (id null), and a method the server
// does not know with method not found (the request's id), not with plain text.
func TestServerHTTPMalformedBody(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused")})
	hs := httptest.NewServer(mcp.NewServer(n, mcp.ServerOptions{}).Handler())
	defer hs.Close()
	type want struct {
		code int
		id   any
		msg  string
	}
	for body, want := range map[string]want{
		strings.Repeat("[", 100_000):                                                 {-32700, nil, "nests arrays and objects more than 10000 deep"},
		`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`:                             {-32600, 3.0, `"tools/list" needs a session, and the request has no Mcp-Session-Id header`},
		`{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"clock"}}`: {-32600, "c", "send initialize first"},
		`{"jsonrpc":"2.0","id":1,"method":`:                                          {-32700, nil, "not JSON"},
		`not json`:                                                                   {-32700, nil, ""},
		``:                                                                           {-32700, nil, ""},
		`42`:                                                                         {-32600, nil, ""},
		`[]`:                                                                         {-32600, nil, ""},
		`[1, 2]`:                                                                     {-32600, nil, ""},
		`{"id":1,"method":"ping"}`:                                                   {-32600, nil, ""},
		`{"jsonrpc":"1.0","id":1,"method":"ping"}`:        {-32600, nil, ""},
		`{"jsonrpc":"2.0","id":7,"method":"nope/nope"}`:   {-32601, 7.0, ""},
		`{"jsonrpc":"2.0","method":"notifications/nope"}`: {-32601, nil, ""},
	} {
		req, err := http.NewRequest("POST", hs.URL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var rpc struct {
			JSONRPC string
			ID      any
			Error   struct {
				Code    int
				Message string
			}
		}
		if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
			json.Unmarshal(raw, &rpc) != nil || rpc.JSONRPC != "2.0" || rpc.ID != want.id || rpc.Error.Code != want.code || !strings.Contains(rpc.Error.Message, want.msg) {
			t.Errorf("body %.60q: %s %s: %.300q, want a JSON-RPC error %d, id %v, %q", body, resp.Status, resp.Header.Get("Content-Type"), raw, want.code, want.id, want.msg)
		}
		// As every answer of the node's API: a browser must not take the
		// error, which may repeat the request, for another type.
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("body %.60q: %s, X-Content-Type-Options %q, want nosniff", body, resp.Status, got)
		}
	}
}

// task_result answers with the result of a session's latest task, by the session
// run_task named; an unknown session is a tool error.
func TestServerTaskResult(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "forty-two")})
	cs := connect(t, mcp.NewServer(n, mcp.ServerOptions{}), nil)
	ctx := context.Background()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: mcp.RunTask, Arguments: map[string]any{"input": "6*7?"}})
	if err != nil {
		t.Fatal(err)
	}
	session, _ := res.Meta[mcp.SessionIDMeta].(string)
	if res.IsError || session == "" {
		t.Fatalf("run_task: %q %v", textOf(res), res.Meta)
	}
	for _, wait := range []bool{true, false} {
		res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: mcp.TaskResult, Arguments: map[string]any{"session_id": session, "wait": wait}})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || textOf(res) != "forty-two" || res.Meta[mcp.StatusMeta] != "completed" || res.Meta[mcp.SessionIDMeta] != session {
			t.Errorf("task_result (wait %v): %q %v", wait, textOf(res), res.Meta)
		}
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: mcp.TaskResult, Arguments: map[string]any{"session_id": "no-such-session"}})
	if err != nil || !res.IsError || !strings.Contains(textOf(res), `no session "no-such-session"`) {
		t.Errorf("task_result of an unknown session: %v %q", err, textOf(res))
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: mcp.TaskResult, Arguments: map[string]any{}})
	if err != nil || !res.IsError || !strings.Contains(textOf(res), "session_id") {
		t.Errorf("task_result without a session: %v %q", err, textOf(res))
	}
}

// A client that offers the protocol 2026-07-28 (the go-sdk's default, and the
// Python SDK's) gets a version the node speaks: server/discover is refused with the
// versions it takes (SEP-2575), on which the client falls back to initialize, and
// an initialize that offers 2026-07-28 is answered with 2025-11-25.
func TestServerHTTPNewerProtocolFallsBack(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "fell back")})
	hs := httptest.NewServer(mcp.NewServer(n, mcp.ServerOptions{}).Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Errorf("protocol %s, want 2025-11-25", v)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_task", Arguments: map[string]any{"input": "hello"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || textOf(res) != "fell back" {
		t.Fatalf("run_task: %q", textOf(res))
	}
	post := func(version, body string) (int, string) {
		req, err := http.NewRequest("POST", hs.URL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if version != "" {
			req.Header.Set("MCP-Protocol-Version", version)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(raw)
	}
	status, body := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2026-07-28","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`)
	if status != http.StatusOK || !strings.Contains(body, `"protocolVersion":"2025-11-25"`) {
		t.Errorf("initialize offering 2026-07-28: %d %s", status, body)
	}
	status, body = post("2026-07-28", `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`)
	if status != http.StatusBadRequest || !strings.Contains(body, `"code":-32022`) || !strings.Contains(body, `"supported":["2025-11-25"`) {
		t.Errorf("a request of 2026-07-28: %d %s", status, body)
	}
}

// Only a session ID of the shape the server makes is resumed: one a client made
// up (a path, lower case, another length) is answered 404 "session not found" (a
// JSON-RPC error of the request's id, where the SDK answers plain text), and
// nothing is recorded under it.
func TestServerHTTPResumesOnlyItsOwnSessionIDs(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused")})
	srv := mcp.NewServer(n, mcp.ServerOptions{})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	ctx := context.Background()
	setLevel := `{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"debug"}}`
	for _, id := range []string{"../../etc/passwd", "a b", "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXY", "ABCDEFGHIJKLMNOPQRSTUVWXY1"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL, strings.NewReader(setLevel))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", id)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" ||
			!strings.Contains(string(raw), `"error":{"code":-32001,"message":"session not found"}`) || !strings.Contains(string(raw), `"id":1`) {
			t.Errorf("session %q: %s %q %q, want 404 with a JSON-RPC error of id 1, session not found", id, resp.Status, resp.Header.Get("Content-Type"), raw)
		}
		if events, err := n.Log().Read(ctx, "mcp/session/"+id, 1); err != nil || len(events) != 0 {
			t.Errorf("session %q: %d events recorded under it (%v)", id, len(events), err)
		}
	}
	// An ID of the server's shape that it does not know is resumed (a restart).
	id := "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL, strings.NewReader(setLevel))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("session %q: %s %q, want it resumed", id, resp.Status, raw)
	}
}

// A request whose Content-Length is above ServerOptions.MaxRequestBytes is
// answered 413 while its body is still on its way (once its head holds the id
// and method, or a second passed), and the connection closes: the handler does
// not wait for the body it refuses.
func TestServerHTTPTooLargeIsRefusedBeforeItsBody(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused")})
	hs := httptest.NewServer(mcp.NewServer(n, mcp.ServerOptions{MaxRequestBytes: 1000}).Handler())
	defer hs.Close()
	c, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"Content-Length: 2000\r\n\r\n{\"jsonrpc\":\"2.0\""); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer while the body is unsent: %v; want 413", err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close || !strings.Contains(string(raw), "larger than 1000 bytes") {
		t.Fatalf("%s (connection close %v): %q; want 413 saying the bound, closing the connection", resp.Status, resp.Close, raw)
	}
}
