package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// cutNode is a gateNode that says when a call of its tool was cut off (its
// context ended) before the test released it.
type cutNode struct {
	gateNode
	cut chan error
}

func (c *cutNode) CallTool(ctx context.Context, _, _, _ string) (string, error) {
	c.started <- struct{}{}
	select {
	case <-c.release:
		return "opened", nil
	case <-ctx.Done():
		c.cut <- context.Cause(ctx)
		return "", ctx.Err()
	}
}

func (c *cutNode) RunTask(ctx context.Context, t node.Task) (messages.TaskResult, error) {
	return c.gateNode.RunTask(ctx, t)
}

// A client without a stream of notifications (GET), which the specification
// allows and which therefore answers none of the session's pings, keeps its
// session while it waits for the answer of a call that runs longer than
// SessionTimeout: its open request shows it is there. Before, the session ended
// once SessionTimeout of pings went unanswered, counted from the session's
// start, so that the call under way at that moment was cut off: its task ran on,
// but a client of protocol 2025-06-18 (no event IDs to resume the stream with)
// got an empty answer, and the Go SDK's client of 2025-11-25, once the session's
// record was pruned, "Bad Request": told the call failed, its caller runs the
// task again.
func TestServerHTTPCallOutlivesUnansweredPings(t *testing.T) {
	c := &cutNode{gateNode: gateNode{started: make(chan struct{}, 1), release: make(chan struct{})}, cut: make(chan error, 1)}
	logs := &records{}
	const timeout = 300 * time.Millisecond
	srv := mcp.NewServer(c, mcp.ServerOptions{SessionTimeout: timeout, ProgressInterval: 50 * time.Millisecond, Logger: slog.New(logs)})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: hs.URL, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	type answer struct {
		res *sdk.CallToolResult
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "gate", Arguments: map[string]any{}})
		answered <- answer{res, err}
	}()
	select {
	case <-c.started:
	case <-ctx.Done():
		t.Fatal("the call never started")
	}
	// Twice the pings that make up SessionTimeout go unanswered while the call
	// runs (ServerOptions.SessionTimeout: the server pings every thirtieth of it).
	for {
		if debug, other := logs.count(slog.LevelDebug, "ping"); debug+other >= 60 {
			break
		}
		select {
		case err := <-c.cut:
			t.Fatalf("the call was cut off while its client waited for its answer: %v", err)
		case <-ctx.Done():
			t.Fatal("the server stopped pinging the client")
		case <-time.After(10 * time.Millisecond):
		}
	}
	close(c.release)
	a := <-answered
	if a.err != nil || a.res.IsError || len(a.res.Content) != 1 {
		t.Fatalf("the call answered %+v, %v; want its tool's answer", a.res, a.err)
	}
	if text, ok := a.res.Content[0].(*sdk.TextContent); !ok || text.Text != "opened" {
		t.Fatalf("the call answered %+v; want \"opened\"", a.res.Content[0])
	}
	// The session is the one the client began with, still live.
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatalf("the next request in the session: %v", err)
	}
}

// serveStdio serves srv over a pair of pipes until the test ends, and returns
// the session's context (which ends within 30 s), the server's lines (a buffer
// of size of them), a function that sends the server a line, and what Serve
// returned.
func serveStdio(t *testing.T, srv *mcp.Server, size int) (ctx context.Context, lines <-chan string, send func(string), served <-chan error) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		done <- srv.Serve(ctx, mcp.LineTransport(inR, outW, 0))
		outW.Close()
	}()
	t.Cleanup(func() { inW.Close() })
	send = func(s string) {
		t.Helper()
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, linesOf(outR, size), send, done
}

// Over stdio, where a client holds its one session for as long as the process
// runs, the server still ends the session (and Serve returns) once the client
// has answered none of SessionTimeout's pings, and not before it answered the
// pings it did: a client that answers keeps its session.
func TestServerStdioEndsOnUnansweredPings(t *testing.T) {
	g := &gateNode{started: make(chan struct{}, 1), release: make(chan struct{})}
	srv := mcp.NewServer(g, mcp.ServerOptions{SessionTimeout: 300 * time.Millisecond})
	ctx, lines, send, served := serveStdio(t, srv, 16)
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// The client answers the first 40 pings (more than SessionTimeout's 30), then
	// none.
	answered := 0
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				if answered < 40 {
					t.Fatalf("the session ended after %d answered pings: %v", answered, <-served)
				}
				if err := <-served; err != nil {
					t.Fatalf("Serve: %v", err)
				}
				return
			}
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal([]byte(l), &m) == nil && m.Method == "ping" && answered < 40 {
				answered++
				send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{}}`)
			}
		case <-ctx.Done():
			t.Fatalf("the session lives on after its client answered no ping for the session timeout (%d answered before)", answered)
		}
	}
}

// Over stdio, a client that answers no ping (some clients do not) but goes on
// sending requests keeps its session past many session timeouts, and so does one
// that sends nothing while one of its calls runs: a message received and a
// request open are signs of life, as an answered ping is. Before, the session
// ended once SessionTimeout of pings went unanswered, in the middle of a call.
func TestServerStdioKeepsAClientThatSendsButAnswersNoPing(t *testing.T) {
	g := &gateNode{started: make(chan struct{}, 1), release: make(chan struct{})}
	srv := mcp.NewServer(g, mcp.ServerOptions{SessionTimeout: 300 * time.Millisecond})
	ctx, lines, send, served := serveStdio(t, srv, 256)
	// next reads the server's lines until one answers id, counting the pings
	// among them, none of which it answers.
	pings := 0
	next := func() (answer string, ok bool) {
		t.Helper()
		for {
			select {
			case l, open := <-lines:
				if !open {
					return "", false
				}
				var m struct {
					ID     json.RawMessage `json:"id"`
					Method string          `json:"method"`
				}
				if json.Unmarshal([]byte(l), &m) != nil {
					continue
				}
				if m.Method == "ping" {
					pings++
					continue
				}
				if m.Method == "" && len(m.ID) > 0 {
					return l, true
				}
			case <-ctx.Done():
				t.Fatal("no answer from the server")
			}
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if _, ok := next(); !ok {
		t.Fatalf("no answer to initialize: %v", <-served)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// The server pings twice in each thirtieth of SessionTimeout (its keepalive
	// and Serve's own): 200 unanswered pings are more than three timeouts.
	const timeouts = 200
	id := 2
	for pings < timeouts {
		send(`{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"tools/list"}`)
		if _, ok := next(); !ok {
			t.Fatalf("the session of a client that sends requests ended after %d unanswered pings: %v", pings, <-served)
		}
		id++
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("the server stopped pinging the client")
		}
	}
	// A call that runs on while the client sends nothing and answers no ping.
	send(`{"jsonrpc":"2.0","id":"call","method":"tools/call","params":{"name":"gate","arguments":{}}}`)
	<-g.started
	for start := pings; pings < start+timeouts; {
		select {
		case l, open := <-lines:
			if !open {
				t.Fatalf("the session ended while its call ran, after %d unanswered pings: %v", pings-start, <-served)
			}
			if strings.Contains(l, `"ping"`) {
				pings++
			}
		case <-ctx.Done():
			t.Fatal("the server stopped pinging the client")
		}
	}
	close(g.release)
	if a, ok := next(); !ok || !strings.Contains(a, `"call"`) || !strings.Contains(a, "opened") {
		t.Fatalf("the call answered %q (session live: %v); want its tool's answer", a, ok)
	}
	send(`{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"tools/list"}`)
	if _, ok := next(); !ok {
		t.Fatalf("the session ended after its call: %v", <-served)
	}
}

// A client without a stream of notifications (GET) whose call's POST was cut
// after its first event, and which resumes the call's stream (GET, Last-Event-ID),
// keeps its session while it waits there, past SessionTimeout, and gets the
// call's answer on the resumed stream. The SDK holds its idle timer only while a
// POST is open: before, the session ended SessionTimeout after the cut, and the
// call with it.
//
// Its client reads initialize's answer whole before it sends initialized, as a
// client does. It read only the headers, which the priming event brings before
// the SDK handled initialize, and under -race the SDK now and then handled the
// initialized notification first ("initialized before initialize"), left the
// session uninitialized and refused the call ("method invalid during
// initialization"), for which the test waited until its timeout (3 of 20 runs
// with a session timeout of 300 ms; it was raised to a second for it).
func TestServerHTTPResumedCallOutlivesTheSessionTimeout(t *testing.T) {
	c := &cutNode{gateNode: gateNode{started: make(chan struct{}, 1), release: make(chan struct{})}, cut: make(chan error, 1)}
	logs := &records{}
	srv := mcp.NewServer(c, mcp.ServerOptions{SessionTimeout: 300 * time.Millisecond, ProgressInterval: 50 * time.Millisecond, Logger: slog.New(logs)})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := post(ctx, t, hs.URL, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	id := resp.Header.Get("Mcp-Session-Id")
	// The answer read whole, as a client does before it sends initialized: the
	// priming event brings the headers before the server handled initialize.
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if id == "" {
		t.Fatalf("initialize answered %s with no session", resp.Status)
	}
	post(ctx, t, hs.URL, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	// The call's POST, cut once its first event (the priming one, with its ID) came.
	resp = post(ctx, t, hs.URL, id, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"gate","arguments":{}}}`)
	var last string
	sc := bufio.NewScanner(resp.Body)
	for last == "" && sc.Scan() {
		last, _ = strings.CutPrefix(sc.Text(), "id: ")
		if !strings.HasPrefix(sc.Text(), "id: ") {
			last = ""
		}
	}
	resp.Body.Close()
	if last == "" {
		t.Fatalf("the call's stream carried no event ID: %v", sc.Err())
	}
	select {
	case <-c.started:
	case <-ctx.Done():
		t.Fatal("the call never started")
	}
	// Until the server sees the cut POST gone, the SDK answers a resumption of its
	// stream 409 Conflict (the stream still has its writer), as under -race it
	// may: a client tries again, as this one does.
	var resumed *http.Response
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", id)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		req.Header.Set("Last-Event-ID", last)
		if resumed, err = http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		}
		if resumed.StatusCode != http.StatusConflict || ctx.Err() != nil {
			break
		}
		resumed.Body.Close()
		time.Sleep(5 * time.Millisecond)
	}
	defer resumed.Body.Close()
	if resumed.StatusCode != http.StatusOK {
		t.Fatalf("the resumption answered %s", resumed.Status)
	}
	// More than SessionTimeout passes while the client waits on the resumed stream:
	// 60 pings go unanswered (the server pings every thirtieth of SessionTimeout,
	// and on the call's stream every ProgressInterval).
	start, _ := logs.count(slog.LevelDebug, "ping")
	for {
		if debug, other := logs.count(slog.LevelDebug, "ping"); debug+other >= start+60 {
			break
		}
		select {
		case err := <-c.cut:
			t.Fatalf("the call was cut off while its client waited on its resumed stream: %v", err)
		case <-ctx.Done():
			t.Fatal("the server stopped pinging the client")
		case <-time.After(10 * time.Millisecond):
		}
	}
	close(c.release)
	sc = bufio.NewScanner(resumed.Body)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || json.Unmarshal([]byte(data), &m) != nil || m.Method != "" || string(m.ID) != "7" {
			continue // the server's pings on the call's stream
		}
		if !strings.Contains(data, `"opened"`) {
			t.Fatalf("the call answered %s; want its tool's answer", data)
		}
		return
	}
	t.Fatalf("the resumed stream ended without the call's answer: %v", sc.Err())
}
