package mcp_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// restartable serves MCP at one URL from nodes over one data dir that the test
// restarts: each restart stops the node serving (its HTTP server's shutdown, then
// the node) and starts another over the same log, as a node process restarts.
type restartable struct {
	t       *testing.T
	dir     string
	opts    mcp.ServerOptions
	hs      *httptest.Server
	backend atomic.Pointer[http.Handler]
	srv     *mcp.Server
	n       *node.Node
	stop    func()
	tools   []tools.Tool // the tools of each node
	// clients are the transports of the clients connect made: a restart closes
	// their idle connections too. The server's side of them is cut, and a POST
	// sent on one before its client noticed would fail with EOF (a POST is not
	// retried): a race of the test's restart, which a client of a real server
	// that restarts may meet once too.
	clients []*http.Transport
}

func newRestartable(t *testing.T, opts mcp.ServerOptions, m llm.Model) *restartable {
	r := &restartable{t: t, dir: t.TempDir(), opts: opts}
	r.hs = newBackendServer(t, r)
	r.start(m)
	t.Cleanup(func() { r.stop() })
	return r
}

// newBackendServer serves r's node serving now, until the test ends.
func newBackendServer(t *testing.T, r *restartable) *httptest.Server {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { (*r.backend.Load()).ServeHTTP(w, req) }))
	t.Cleanup(hs.Close)
	return hs
}

func (r *restartable) start(m llm.Model) {
	r.t.Helper()
	// A stop gives the calls in flight a short grace: these tests hold a model's
	// call across the restart, which a node's default grace (5 s) would wait out
	// while the clients' two attempts to resume their streams, a second apart,
	// found no server and gave up.
	n, err := node.New(context.Background(), node.Config{DataDir: r.dir, Model: m, Tools: r.tools, HandoffGrace: 100 * time.Millisecond})
	if err != nil {
		r.t.Fatal(err)
	}
	stopNode, err := n.Start(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	r.srv, r.n = mcp.NewServer(n, r.opts), n
	h := r.srv.Handler()
	r.backend.Store(&h)
	srv := r.srv
	r.stop = sync.OnceFunc(func() {
		srv.CloseStreams()
		stopNode()
		_ = n.Close()
	})
}

// restart stops the node serving, cuts the connections open to it, and serves
// from a new node with model m.
func (r *restartable) restart(m llm.Model) {
	r.t.Helper()
	r.stop()
	r.hs.CloseClientConnections()
	r.closeIdle()
	r.start(m)
}

func (r *restartable) closeIdle() {
	for _, tr := range r.clients {
		tr.CloseIdleConnections()
	}
}

// restartAfter restarts as restart does, with no node serving (503) for down.
func (r *restartable) restartAfter(down time.Duration, m llm.Model) {
	r.t.Helper()
	if down <= 0 {
		r.restart(m)
		return
	}
	r.stop()
	var unavailable http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "restarting", http.StatusServiceUnavailable)
	})
	r.backend.Store(&unavailable)
	r.hs.CloseClientConnections()
	r.closeIdle()
	time.Sleep(down)
	r.start(m)
}

func (r *restartable) connect(ctx context.Context, opts *sdk.ClientOptions) *sdk.ClientSession {
	r.t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	r.clients = append(r.clients, tr)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: r.hs.URL, HTTPClient: &http.Client{Transport: tr}}, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { cs.Close() })
	return cs
}

func notesCatalog() mcp.Catalog {
	read := func(_ context.Context, uri string) ([]*sdk.ResourceContents, error) {
		return mcp.TextContents(uri, "text/plain", "x"), nil
	}
	return mcp.Catalog{
		Resources: []mcp.Resource{
			{Resource: sdk.Resource{URI: "notes://a", Name: "a"}, Read: read},
			{Resource: sdk.Resource{URI: "notes://b", Name: "b"}, Read: read},
		},
		Templates: []mcp.ResourceTemplate{{ResourceTemplate: sdk.ResourceTemplate{URITemplate: "notes://day/{n}", Name: "day"},
			Read: func(ctx context.Context, uri string, _ map[string]string) ([]*sdk.ResourceContents, error) {
				return read(ctx, uri)
			}}},
	}
}

// A client's log level and resource subscriptions outlive a restart of its node:
// the node that resumes its session sets them again (they are events of the
// session's stream in the log), and the client goes on getting its notifications.
func TestServerHTTPSessionStateOutlivesRestart(t *testing.T) {
	r := newRestartable(t, mcp.ServerOptions{Sources: []mcp.Source{notesCatalog()}}, answerScript(t, "unused"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logs, updates := make(chan string, 256), make(chan string, 256)
	cs := r.connect(ctx, &sdk.ClientOptions{
		LoggingMessageHandler:  func(_ context.Context, req *sdk.LoggingMessageRequest) { logs <- fmt.Sprint(req.Params.Data) },
		ResourceUpdatedHandler: func(_ context.Context, req *sdk.ResourceUpdatedNotificationRequest) { updates <- req.Params.URI },
	})
	if err := cs.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	for _, uri := range []string{"notes://a", "notes://b"} {
		if err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: "notes://b"}); err != nil {
		t.Fatal(err)
	}
	// An update before the restart: the client's stream of notifications has
	// events (with IDs, which it names when it reconnects to the next node).
	awaitUpdate := func(when string) {
		t.Helper()
		for {
			_ = r.srv.ResourceUpdated(ctx, "notes://b")
			_ = r.srv.ResourceUpdated(ctx, "notes://a")
			select {
			case uri := <-updates:
				if uri != "notes://a" {
					t.Fatalf("an update of %s %s, which the client unsubscribed from", uri, when)
				}
				return
			case <-ctx.Done():
				t.Fatalf("no update of notes://a %s: the subscription was lost", when)
			case <-time.After(100 * time.Millisecond): // the client's stream of notifications may not be there yet
			}
		}
	}
	awaitUpdate("before the restart")

	r.restart(answerScript(t, "unused"))
	for len(logs) > 0 {
		<-logs
	}
	// The call resumes the session; its log notifications (debug: "started")
	// come at the level the client set before the restart.
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "calculator", Arguments: map[string]any{"expression": "6*7"}})
	if err != nil || res.IsError || textOf(res) != "42" {
		t.Fatalf("calculator after the restart: %v %v", err, res)
	}
	select {
	case got := <-logs:
		if !strings.Contains(got, "tool calculator") {
			t.Errorf("log notification %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("no log notification of the call after the restart: the log level was lost")
	}
	// The client is still subscribed to notes://a, and not to notes://b.
	awaitUpdate("after the restart")
}

// A session's subscriptions are bounded: one past the bound, or to a URI longer
// than the server takes, is refused with a JSON-RPC invalid-params error that says
// so, and the session's others stay.
func TestServerSubscriptionsAreBounded(t *testing.T) {
	r := newRestartable(t, mcp.ServerOptions{Sources: []mcp.Source{notesCatalog()}}, answerScript(t, "unused"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := r.connect(ctx, nil)
	const bound = 64
	for i := range bound {
		if err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: fmt.Sprintf("notes://day/%d", i)}); err != nil {
			t.Fatalf("subscription %d: %v", i, err)
		}
	}
	refused := func(uri, want string) {
		t.Helper()
		err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: uri})
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpc.Message, want) {
			t.Fatalf("subscribe %.40s: %v, want an invalid-params error saying %q", uri, err, want)
		}
	}
	refused("notes://day/past-the-bound", "too many subscriptions")
	if err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: "notes://day/3"}); err != nil {
		t.Fatalf("a subscription the session has, again: %v", err)
	}
	if err := cs.Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: "notes://day/0"}); err != nil {
		t.Fatal(err)
	}
	if err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: "notes://day/past-the-bound"}); err != nil {
		t.Fatalf("a subscription once one ended: %v", err)
	}
	refused("notes://day/"+strings.Repeat("x", 4096), "longer than")
	// The bound holds for the session resumed after a restart, which has them all.
	r.restart(answerScript(t, "unused"))
	refused("notes://day/one-more", "too many subscriptions")

	// And for a session without an ID (over stdio), which has no record (at a
	// protocol with resources/subscribe: from 2026-07-28 on subscriptions are
	// streams of their own).
	st, ct := sdk.NewInMemoryTransports()
	go r.srv.Serve(ctx, st)
	stdio, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer stdio.Close()
	for i := range bound {
		if err := stdio.Subscribe(ctx, &sdk.SubscribeParams{URI: fmt.Sprintf("notes://day/%d", i)}); err != nil {
			t.Fatalf("stdio subscription %d: %v", i, err)
		}
	}
	err = stdio.Subscribe(ctx, &sdk.SubscribeParams{URI: "notes://day/past-the-bound"})
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpc.Message, "too many subscriptions") {
		t.Fatalf("stdio subscription past the bound: %v", err)
	}
}

// holdModel answers "held: <input>" once released, and tells when it is asked.
type holdModel struct {
	asked   chan struct{}
	release chan struct{}
	calls   atomic.Int32
}

func newHoldModel(released bool) *holdModel {
	m := &holdModel{asked: make(chan struct{}, 16), release: make(chan struct{})}
	if released {
		close(m.release)
	}
	return m
}

func (*holdModel) Name() string { return "hold" }

func (m *holdModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	m.calls.Add(1)
	select {
	case m.asked <- struct{}{}:
	default:
	}
	select {
	case <-m.release:
	case <-ctx.Done():
		return llm.Response{}, ctx.Err()
	}
	input := ""
	for _, msg := range req.Messages {
		if msg.Role == messages.RoleUser {
			input = msg.Content
		}
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "held: " + input}}, nil
}

// A run_task whose node restarts under it answers with its task's result: the
// node that stops closes the call's stream with a retry instead of failing the
// call, the client resumes the stream (Last-Event-ID) on the node that serves
// next, and that node, which has the call in the session's stream of the log and
// resumed the task, answers with the task's result once it ends. The task runs
// once.
func TestServerHTTPRunTaskOutlivesRestart(t *testing.T) {
	first := newHoldModel(false)
	r := newRestartable(t, mcp.ServerOptions{ReconnectDelay: time.Second}, first)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := r.connect(ctx, nil)
	type answer struct {
		res *sdk.CallToolResult
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_task", Arguments: map[string]any{"input": "through the restart"}})
		answered <- answer{res, err}
	}()
	select {
	case <-first.asked:
	case <-ctx.Done():
		t.Fatal("the model was never asked")
	}
	second := newHoldModel(true)
	r.restart(second)
	var a answer
	select {
	case a = <-answered:
	case <-ctx.Done():
		t.Fatal("run_task did not answer after the restart")
	}
	if a.err != nil || a.res.IsError || textOf(a.res) != "held: through the restart" {
		t.Fatalf("run_task across the restart: %v %+v", a.err, a.res)
	}
	if got := second.calls.Load(); got != 1 {
		t.Errorf("the model of the node that serves next was asked %d times, want once (the resumed task)", got)
	}
	// A GET that names a stream the node does not have (Last-Event-ID), or a
	// malformed ID, is refused with 400 and changes nothing.
	for _, last := range []string{"NOSUCHSTREAM_3", "not an id", "A_B_C", "X_-1", strings.Repeat("Z", 5000) + "_1"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.hs.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		req.Header.Set("Last-Event-ID", last)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("Last-Event-ID %.20q: %s, want 400", last, resp.Status)
		}
	}
	// The conversation goes on in the task's session.
	session, _ := a.res.Meta[mcp.SessionIDMeta].(string)
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_task", Arguments: map[string]any{"input": "and then", "session_id": session}})
	if err != nil || res.IsError || textOf(res) != "held: and then" || res.Meta[mcp.SessionIDMeta] != session || session == "" {
		t.Fatalf("run_task in session %q: %v %+v", session, err, res)
	}
}

// post sends a JSON-RPC message to the MCP endpoint at url in session id, and
// returns the response (the caller closes its body).
// freshConns sends each request on a connection of its own: one kept alive from
// before a restart, which cut it, would fail a POST with EOF (the transport does
// not send a POST again on another).
var freshConns = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func post(ctx context.Context, t *testing.T, url, id, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	resp, err := freshConns.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A run_task call sent again in its session with the same JSON-RPC ID and
// arguments (a client whose call was cut, after the node restarted) answers with
// the result of the task the first one started rather than run it again; with
// other arguments it is another call.
func TestServerHTTPRunTaskSentAgain(t *testing.T) {
	first := newHoldModel(false)
	r := newRestartable(t, mcp.ServerOptions{}, first)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := r.connect(ctx, nil).ID()
	call := func(input string) string {
		return `{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"run_task","arguments":{"input":"` + input + `"}}}`
	}
	cctx, cut := context.WithCancel(ctx)
	resp := post(cctx, t, r.hs.URL, id, call("once"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("run_task: %s", resp.Status)
	}
	select {
	case <-first.asked:
	case <-ctx.Done():
		t.Fatal("the model was never asked")
	}
	cut() // the client's connection drops
	resp.Body.Close()
	second := newHoldModel(true)
	r.restart(second)
	answer := func(input string) string {
		t.Helper()
		return runTaskAnswer(ctx, t, r.hs.URL, id, 41, call(input))
	}
	if got := answer("once"); got != "held: once" {
		t.Errorf("the call sent again answered %q", got)
	}
	if got := second.calls.Load(); got != 1 {
		t.Errorf("the model was asked %d times after the restart, want once (the resumed task, not a second run)", got)
	}
	if got := answer("twice"); got != "held: twice" {
		t.Errorf("a call with the same ID and other arguments answered %q", got)
	}
}

// runTaskAnswer posts body, a run_task call with JSON-RPC ID rpcID, on session id
// and returns the text of its answer, failing the test for an error.
func runTaskAnswer(ctx context.Context, t *testing.T, url, id string, rpcID int, body string) string {
	t.Helper()
	resp := post(ctx, t, url, id, body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("run_task %s: %s %v", body, resp.Status, err)
	}
	for line := range strings.Lines(string(b)) {
		data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
		var msg struct {
			ID     int
			Result *sdk.CallToolResult
		}
		if ok && json.Unmarshal([]byte(data), &msg) == nil && msg.Result != nil {
			if msg.ID != rpcID || msg.Result.IsError {
				t.Fatalf("run_task %s: %s", body, data)
			}
			return textOf(msg.Result)
		}
	}
	t.Fatalf("run_task %s: no answer in %q", body, b)
	return ""
}

// Two nodes behind one load balancer without sticky sessions (here two servers
// over one log, each with its own copy of the sessions' states): a run_task that
// one of them recorded and answered, sent again to the other, which had read the
// session before, answers with that task's result instead of running it again.
func TestServerRunTaskSentAgainToAnotherNode(t *testing.T) {
	m := newHoldModel(true)
	n := nodetest.Start(t, node.Config{Model: m})
	a := httptest.NewServer(mcp.NewServer(n, mcp.ServerOptions{}).Handler())
	defer a.Close()
	b := httptest.NewServer(mcp.NewServer(n, mcp.ServerOptions{}).Handler())
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: a.URL}, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	id := cs.ID()
	call := func(rpcID int, input string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_task","arguments":{"input":%q}}}`, rpcID, input)
	}
	// b reads the session: a first call through it.
	if got := runTaskAnswer(ctx, t, b.URL, id, 7, call(7, "first")); got != "held: first" {
		t.Fatalf("the first call answered %q", got)
	}
	if got := runTaskAnswer(ctx, t, a.URL, id, 41, call(41, "once")); got != "held: once" {
		t.Fatalf("the call answered %q", got)
	}
	asked := m.calls.Load()
	// The client sends the call again, and the load balancer picks b.
	if got := runTaskAnswer(ctx, t, b.URL, id, 41, call(41, "once")); got != "held: once" {
		t.Errorf("the call sent again answered %q", got)
	}
	if got := m.calls.Load(); got != asked {
		t.Errorf("the model was asked %d more times: the call sent again ran its task again", got-asked)
	}
}

// A run_task that continues a session, recorded but cut before its task was
// submitted (its node died in between), answers for its own task: sent again, it
// runs that task once and answers with it, not with the session's previous task;
// resumed by its stream (Last-Event-ID), it says its task never started once
// StartGrace passed without it.
func TestServerRunTaskContinuingASessionCutBeforeItsTask(t *testing.T) {
	m := newHoldModel(true)
	n := nodetest.Start(t, node.Config{Model: m})
	hs := httptest.NewServer(mcp.NewServer(n, mcp.ServerOptions{StartGrace: 300 * time.Millisecond}).Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: hs.URL}, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	id := cs.ID()
	call := func(rpcID int, args string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_task","arguments":%s}}`, rpcID, args)
	}
	if got := runTaskAnswer(ctx, t, hs.URL, id, 1, call(1, `{"input":"first","session_id":"conv"}`)); got != "held: first" {
		t.Fatalf("the first task answered %q", got)
	}
	// The second call as a node that died right after recording it left it.
	args := `{"input":"second","session_id":"conv"}`
	sum := sha256.Sum256([]byte(args))
	stream := eventlog.MCPSessionStreamPrefix + id
	recorded, err := n.Log().Read(ctx, stream, 1)
	if err != nil || len(recorded) == 0 {
		t.Fatalf("the session's stream: %d events, %v", len(recorded), err)
	}
	resp := recordCutCallAndResume(ctx, t, n, hs.URL, id, messages.MCPCallStarted{RequestID: "2", Stream: "DEADSTREAM",
		ArgsHash: hex.EncodeToString(sum[:]), TaskSession: "conv", TaskID: "mcp-task-cut"})
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "never started") || strings.Contains(string(b), "held: first") {
		t.Errorf("the resumed stream: %s %s, want that its task never started", resp.Status, b)
	}
	// Sent again.
	before := m.calls.Load()
	if got := runTaskAnswer(ctx, t, hs.URL, id, 2, call(2, args)); got != "held: second" {
		t.Errorf("the call sent again answered %q, want its own task's answer", got)
	}
	if got := m.calls.Load() - before; got != 1 {
		t.Errorf("the model was asked %d times for the call sent again, want once", got)
	}
	events, err := n.Log().Read(ctx, "conv", 1)
	if err != nil {
		t.Fatal(err)
	}
	var tasks []string
	for _, e := range events {
		if e.Type == messages.TypeTaskSubmitted {
			tasks = append(tasks, e.ID)
		}
	}
	if len(tasks) != 2 || tasks[1] != "mcp-task-cut" {
		t.Errorf("the session's tasks: %v, want the first and mcp-task-cut", tasks)
	}
}

// A run_task recorded but whose task was still on its way when its node died (on
// a cluster, in Kafka until the group gives the session's partition to another
// node): its stream, resumed, waits for the task rather than telling the client
// at once that it never started, which a client sending the call again with a new
// request ID would answer with a second task beside the first.
func TestServerRunTaskResumedWhileItsTaskIsOnItsWay(t *testing.T) {
	m := newHoldModel(true)
	n := nodetest.Start(t, node.Config{Model: m})
	hs := httptest.NewServer(mcp.NewServer(n, mcp.ServerOptions{}).Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: hs.URL}, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	id := cs.ID()
	sum := sha256.Sum256([]byte(`{"input":"late","session_id":"conv"}`))
	resp := recordCutCallAndResume(ctx, t, n, hs.URL, id, messages.MCPCallStarted{RequestID: "7", Stream: "CUTSTREAM",
		ArgsHash: hex.EncodeToString(sum[:]), TaskSession: "conv", TaskID: "mcp-task-late"})
	defer resp.Body.Close()
	lines := bufio.NewReader(resp.Body)
	first, err := lines.ReadString('\n')
	if err != nil || !strings.HasPrefix(first, ": resumed") {
		t.Fatalf("the resumed stream began with %q (%v)", first, err)
	}
	// The server polls for the task now; it arrives (the bus delivers it late).
	if _, err := n.Submit(ctx, node.Task{ID: "mcp-task-late", SessionID: "conv", Input: "late"}); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(lines)
	if !strings.Contains(string(rest), "held: late") || strings.Contains(string(rest), "never started") {
		t.Errorf("the resumed stream: %s, want the late task's answer", rest)
	}
	if got := m.calls.Load(); got != 1 {
		t.Errorf("the model was asked %d times, want once", got)
	}
}

// recordCutCallAndResume records call in MCP session id's stream, as a node that
// died right after recording it left it, and resumes the call's stream on the
// server at url (Last-Event-ID: its first event), as the client's SDK does.
func recordCutCallAndResume(ctx context.Context, t *testing.T, n *node.Node, url, id string, call messages.MCPCallStarted) *http.Response {
	t.Helper()
	stream := eventlog.MCPSessionStreamPrefix + id
	recorded, err := n.Log().Read(ctx, stream, 1)
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	if len(recorded) > 0 {
		seq = recorded[len(recorded)-1].Seq
	}
	e, err := messages.NewEnvelope(&call)
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID, e.Seq, e.TS, e.Actor = "cut-"+call.Stream, stream, seq+1, time.Now().UnixMicro(), "mcp/server"
	if err := n.Log().Append(ctx, []messages.Envelope{e}); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	req.Header.Set("Last-Event-ID", call.Stream+"_0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// The Python SDK's client, with its defaults, keeps its log level and
// subscriptions across a restart of the server (TROUPE_MCP_PY names a python with
// the SDK: deploy/mcp-sdk.sh py; the test is skipped without it).
func TestServerSessionStateOutlivesRestartPython(t *testing.T) {
	pythonAcrossRestart(t, mcp.ServerOptions{Sources: []mcp.Source{notesCatalog()}}, 0)
}

// A node down longer than the Python SDK's own wait before it reconnects its
// stream of notifications, twice (1 s each), but less than twice the node's
// ReconnectDelay, which the stream's retry gives the client: the client's
// subscriptions get their updates again.
func TestServerNotificationsOutliveASlowRestartPython(t *testing.T) {
	pythonAcrossRestart(t, mcp.ServerOptions{Sources: []mcp.Source{notesCatalog()}, ReconnectDelay: 5 * time.Second}, 3500*time.Millisecond)
}

// pythonAcrossRestart runs testdata/mcp-py-state.py against a server of opts that
// restarts while the client is connected, down (answering 503) for down.
func pythonAcrossRestart(t *testing.T, opts mcp.ServerOptions, down time.Duration) {
	py := os.Getenv("TROUPE_MCP_PY")
	if py == "" {
		t.Skip("TROUPE_MCP_PY is not set (deploy/mcp-sdk.sh py)")
	}
	r := newRestartable(t, opts, answerScript(t, "unused"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "mcp-py-state.py"), r.hs.URL)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderrR, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	lines := bufio.NewScanner(stderrR)
	for lines.Scan() && lines.Text() != "subscribed" {
		stderr.WriteString(lines.Text() + "\n")
	}
	ready := make(chan struct{})
	go func() {
		for lines.Scan() && lines.Text() != "ready" {
			stderr.WriteString(lines.Text() + "\n")
		}
		close(ready)
	}()
	for waiting := true; waiting; {
		_ = r.srv.ResourceUpdated(ctx, "notes://b")
		_ = r.srv.ResourceUpdated(ctx, "notes://a")
		select {
		case <-ready:
			waiting = false
		case <-ctx.Done():
			t.Fatalf("the client never got ready: %s\n%s", stdout.String(), stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	r.restartAfter(down, answerScript(t, "unused"))
	fmt.Fprintln(stdin, "go")
	go func() {
		for lines.Scan() {
			stderr.WriteString(lines.Text() + "\n")
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for waiting := true; waiting; {
		_ = r.srv.ResourceUpdated(ctx, "notes://b")
		_ = r.srv.ResourceUpdated(ctx, "notes://a")
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("client: %v", err)
			}
			waiting = false
		case <-time.After(100 * time.Millisecond):
		}
	}
	var out struct {
		Calc          string
		Logs, Updates []string
		Fatal         string
	}
	if err := json.Unmarshal([]byte(stdout.String()), &out); err != nil || out.Fatal != "" || out.Calc != "42" {
		t.Fatalf("client printed %q (%v)\n%s", stdout.String(), err, stderr.String())
	}
	if !slices.ContainsFunc(out.Logs, func(l string) bool { return strings.Contains(l, "tool calculator") }) {
		t.Errorf("log notifications after the restart %q: the log level was lost", out.Logs)
	}
	if len(out.Updates) == 0 || slices.ContainsFunc(out.Updates, func(u string) bool { return u != "notes://a" }) {
		t.Errorf("updates after the restart %q, want those of notes://a alone", out.Updates)
	}
}

// A run_task the node refuses (bad arguments) is a tool error that records
// nothing in the session's stream.
func TestServerHTTPBadRunTaskRecordsNothing(t *testing.T) {
	r := newRestartable(t, mcp.ServerOptions{}, answerScript(t, "unused"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := r.connect(ctx, nil)
	for _, args := range []map[string]any{{"input": "   "}, {"input": "x", "session_id": "bad id\n"}, {"input": "x", "max_tokens": -1}} {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_task", Arguments: args})
		if err != nil || !res.IsError {
			t.Fatalf("run_task %v: %v %+v, want a tool error", args, err, res)
		}
	}
	events, err := r.n.Log().Read(ctx, "mcp/session/"+cs.ID(), 1)
	if err != nil || len(events) != 0 {
		t.Fatalf("the session's stream after bad calls: %v %v", events, err)
	}
}
