package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// A request the server refuses over Streamable HTTP before the SDK's handler
// answers it (too large for the server, or nesting deeper than the SDK decodes)
// fails that one call of the go-sdk's client, with its defaults, with the
// reason, and its session goes on. The go-sdk's client keeps its connection
// only when the refusal is a JSON-RPC error it can decode as the answer to a
// request, which needs the request's id: an error of id null failed the
// connection, and every later call of the client answered "client is closing".
func TestServerHTTPRefusalsLeaveTheGoSDKsSessionUp(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: newHoldModel(true), Tools: []tools.Tool{tools.Calculator{}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url, cs := sdkSession(ctx, t, mcp.NewServer(n, mcp.ServerOptions{MaxRequestBytes: 64 << 10}))
	nested := func(depth int) json.RawMessage {
		return json.RawMessage(`{"input":"x","extra":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`)
	}
	for _, c := range []struct {
		label string
		args  any
		says  string
	}{
		{"an input larger than the server takes", map[string]any{"input": strings.Repeat("x", 100<<10)}, "the request is larger than 65536 bytes"},
		{"arguments nested 2000 deep", nested(2000), "nesting depth"},
		{"arguments nested 9000 deep", nested(9000), "nesting depth"},
	} {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: mcp.RunTask, Arguments: c.args})
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || !strings.Contains(rpc.Message, c.says) {
			t.Errorf("%s: %v, want a JSON-RPC error saying %q", c.label, err, c.says)
		}
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: mcp.RunTask, Arguments: map[string]any{"input": "still up"}})
		if err != nil || res.IsError || textOf(res) != "held: still up" {
			t.Fatalf("run_task after %s: %v %v, want the session up", c.label, err, res)
		}
	}

	// A call without params: the SDK's refusal, once, with the request's id.
	resp := post(ctx, t, url, cs.ID(), `{"jsonrpc":"2.0","id":6,"method":"tools/call"}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var a rpcAnswer
	if json.Unmarshal(raw, &a) != nil || string(a.ID) != "6" || a.Error == nil || a.Error.Message != `invalid request: missing required "params"` {
		t.Errorf("a call without params: %s %q", resp.Status, raw)
	}

	// A body without a Content-Length, cut at the bound, is answered with the id
	// its head holds when it is a request's; a client's answer to a request of the
	// server (no method) has an id of the server's, and gets id null.
	big := strings.Repeat("x", 100<<10)
	for body, id := range map[string]string{
		`{"jsonrpc":"2.0","id":"big-1","method":"tools/call","params":{"name":"run_task","arguments":{"input":"` + big + `"}}}`: `"big-1"`,
		`{"jsonrpc":"2.0","id":"big-2","result":{"content":[{"type":"text","text":"` + big + `"}]}}`:                            `null`,
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, io.MultiReader(strings.NewReader(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("MCP-Protocol-Version", cs.InitializeResult().ProtocolVersion)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var a rpcAnswer
		if resp.StatusCode != http.StatusRequestEntityTooLarge || json.Unmarshal(raw, &a) != nil || string(a.ID) != id || a.Error == nil || a.Error.Code != -32600 {
			t.Errorf("a chunked body past the bound (%.40s…): %s %q, want 413 with a JSON-RPC error of id %s", body, resp.Status, raw, id)
		}
	}
}

// tcpCut passes TCP connections to target until cut, which closes those open.
type tcpCut struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newTCPCut(t *testing.T, target string) *tcpCut {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpCut{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *tcpCut) url() string { return "http://" + p.ln.Addr().String() }

func (p *tcpCut) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// The go-sdk's client, with its defaults, over Streamable HTTP: a run_task whose
// connection drops while its task runs answers with the task's result (the client
// resumes the call's stream with Last-Event-ID, the task runs once, and the
// progress it was told ends at its total); a run_task whose client cancels it
// (notifications/cancelled) ends its task, recorded as cancelled with the reason,
// which task_result then tells; and the session goes on.
func TestServerHTTPGoSDKRunTaskCutAndCancelled(t *testing.T) {
	m := newHoldModel(false)
	n := nodetest.Start(t, node.Config{Model: m})
	hs := httptest.NewServer(mcp.NewServer(n, mcp.ServerOptions{}).Handler())
	defer hs.Close()
	p := newTCPCut(t, strings.TrimPrefix(hs.URL, "http://"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	progress := make(chan *sdk.ProgressNotificationParams, 256)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) { progress <- r.Params },
	}).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: p.url()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	// Cancelled while its model is asked.
	cctx, ccancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: mcp.RunTask, Arguments: map[string]any{"input": "never mind", "session_id": "gosdk-cancel"}})
		done <- err
	}()
	select {
	case <-m.asked:
	case <-ctx.Done():
		t.Fatal("the model was not asked")
	}
	ccancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled call: %v, want context.Canceled", err)
	}
	var res *sdk.CallToolResult
	waitFor(t, 20*time.Second, "the cancelled task's end", func() bool {
		res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: mcp.TaskResult, Arguments: map[string]any{"session_id": "gosdk-cancel", "wait": false}})
		return err == nil && res.Meta[mcp.StatusMeta] != "running"
	})
	if !res.IsError || res.Meta[mcp.StatusMeta] != "failed" || !strings.Contains(textOf(res), "reason cancelled") || !strings.Contains(textOf(res), "went away") {
		t.Errorf("task_result of the cancelled task: %q %v, want it failed, cancelled, saying why", textOf(res), res.Meta)
	}

	// Cut while its model is asked, once the call's stream told its start.
	calls := m.calls.Load()
	params := &sdk.CallToolParams{Name: mcp.RunTask, Arguments: map[string]any{"input": "through a cut", "session_id": "gosdk-cut"}}
	params.SetProgressToken("cut")
	answer := make(chan error, 1)
	go func() {
		res, err = cs.CallTool(ctx, params)
		answer <- err
	}()
	for started := false; !started; {
		select {
		case pr := <-progress:
			started = pr.ProgressToken == "cut"
		case <-ctx.Done():
			t.Fatal("no progress of the call")
		}
	}
	select {
	case <-m.asked:
	case <-ctx.Done():
		t.Fatal("the model was not asked")
	}
	p.cut()
	close(m.release)
	if err := <-answer; err != nil || res.IsError || textOf(res) != "held: through a cut" {
		t.Fatalf("run_task through a cut: %v %v", err, res)
	}
	if got := m.calls.Load() - calls; got != 1 {
		t.Errorf("the model was asked %d times for the task, want once", got)
	}
	// The client hands notifications to its handler apart from the answer: the
	// end's may come after it.
	for ended := false; !ended; {
		select {
		case pr := <-progress:
			ended = pr.ProgressToken == "cut" && pr.Total > 0 && pr.Progress == pr.Total
		case <-time.After(10 * time.Second):
			t.Fatal("no progress at its total within 10 s of the answer")
		}
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: mcp.RunTask, Arguments: map[string]any{"input": "after"}})
	if err != nil || res.IsError || textOf(res) != "held: after" {
		t.Fatalf("run_task after: %v %v", err, res)
	}
}

// A request whose progressToken is a number the server would not send back as
// sent (an integer past 2^53, which the SDK reads as a float64; 1.5 comes back
// as 1.5) is refused with
// invalid params saying so, over Streamable HTTP and stdio, as such an id is:
// 2^60+1 came back in each progress notification as 1152921504606847000, which
// no client matches to its request. A token of 2^53 comes back as sent.
func TestServerRefusesAProgressTokenItCannotSendBack(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused"), Tools: []tools.Tool{tools.Calculator{}}})
	srv := mcp.NewServer(n, mcp.ServerOptions{})
	for _, over := range []string{"http", "stdio"} {
		t.Run(over, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var transport sdk.Transport
			if over == "http" {
				hs := httptest.NewServer(srv.Handler())
				defer hs.Close()
				transport = &sdk.StreamableClientTransport{Endpoint: hs.URL}
			} else {
				inR, inW := io.Pipe()
				outR, outW := io.Pipe()
				served := make(chan struct{})
				go func() {
					defer close(served)
					_ = srv.Serve(ctx, mcp.LineTransport(inR, outW, 0))
					outW.Close()
				}()
				defer func() { inW.Close(); cancel(); <-served }()
				transport = &sdk.IOTransport{Reader: outR, Writer: inW}
			}
			tokens := make(chan any, 64)
			cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) { tokens <- r.Params.ProgressToken },
			}).Connect(ctx, transport, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			p := &sdk.CallToolParams{Name: "calculator", Arguments: map[string]any{"expression": "6*7"}}
			p.SetProgressToken(int64(1<<60 + 1))
			_, err = cs.CallTool(ctx, p)
			var rpc *jsonrpc.Error
			if !errors.As(err, &rpc) || rpc.Code != -32602 || !strings.Contains(rpc.Message, "the progressToken 1152921504606846977 is not an integer from -2^53 to 2^53") {
				t.Errorf("a progressToken of 2^60+1: %v, want invalid params saying why", err)
			}
			p.SetProgressToken(int64(1 << 53))
			res, err := cs.CallTool(ctx, p)
			if err != nil || res.IsError || textOf(res) != "42" {
				t.Fatalf("a progressToken of 2^53: %v %v", err, res)
			}
			select {
			case tok := <-tokens:
				if tok != float64(1<<53) {
					t.Errorf("the progress of a call whose token is 2^53 came with the token %v", tok)
				}
			case <-ctx.Done():
				t.Fatal("no progress of the call whose token is 2^53")
			}
		})
	}
}

// A request whose body stops on its way past the HTTP server's read timeout is
// answered with the id its head holds, which its client may still read: the
// go-sdk's client takes an error of id null for a broken connection.
func TestServerHTTPBodyCutByTheReadTimeoutIsAnsweredWithItsID(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused")})
	hs := httptest.NewUnstartedServer(mcp.NewServer(n, mcp.ServerOptions{}).Handler())
	hs.Config.ReadTimeout = 300 * time.Millisecond
	hs.Start()
	defer hs.Close()
	c := dialHTTP(t, hs)
	head := `{"jsonrpc":"2.0","id":"slow-1","method":"tools/call","params":{"name":"run_task","arguments":{"input":"`
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"Content-Length: 100000\r\n\r\n"+head); err != nil {
		t.Fatal(err)
	}
	resp, raw := readRawAnswer(t, c, "no answer to a body that stopped: %v")
	var a rpcAnswer
	if json.Unmarshal(raw, &a) != nil || string(a.ID) != `"slow-1"` || a.Error == nil || !strings.Contains(a.Error.Message, "could not be read") {
		t.Fatalf("%s %q, want a JSON-RPC error of id \"slow-1\" saying the body could not be read", resp.Status, raw)
	}
	// As on the node's other routes: 408, saying why, not with the
	// connection's addresses ("read tcp 127.0.0.1:…: i/o timeout").
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(a.Error.Message, "not sent in time") || strings.Contains(a.Error.Message, "tcp") {
		t.Fatalf("%s %q, want 408 saying the body was not sent in time", resp.Status, raw)
	}
}
