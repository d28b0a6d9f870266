package mcp_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// gateModel is a model whose every call waits for a token on release (or for
// free to close) before its inner model answers; asked tells of each call.
type gateModel struct {
	inner   llm.Model
	asked   chan struct{}
	release chan struct{}
	free    chan struct{}
	calls   atomic.Int32
}

func newGateModel(inner llm.Model) *gateModel {
	return &gateModel{inner: inner, asked: make(chan struct{}, 64), release: make(chan struct{}), free: make(chan struct{})}
}

func (*gateModel) Name() string { return "gate" }

func (m *gateModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	m.calls.Add(1)
	m.asked <- struct{}{}
	select {
	case <-m.release:
	case <-m.free:
	case <-ctx.Done():
		return llm.Response{}, ctx.Err()
	}
	return m.inner.Generate(ctx, req)
}

// serveBoth connects a client to srv, served for n: over in-memory transports
// (no call is recorded, as over stdio) or over Streamable HTTP (each run_task
// call is recorded in its MCP session's stream).
func serveBoth(t *testing.T, over string, n *node.Node, srv *mcp.Server, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	if over == "memory" {
		return connect(t, srv, opts)
	}
	n.Handle("/mcp", srv.Handler())
	hs := httptest.NewServer(n.Handler())
	closed := make(chan struct{})
	t.Cleanup(func() {
		// A handler that never returns (a call waiting on a task that never
		// ends) holds Close until the node stops, after this.
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Error("the HTTP server did not close within 10 s")
		}
	})
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts).Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: hs.URL + "/mcp"}, nil)
	if err != nil {
		go func() { hs.Close(); close(closed) }()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		go func() { hs.Close(); close(closed) }()
	})
	return cs
}

// submittedTasks counts the task.submitted events of a session.
func submittedTasks(t *testing.T, n *node.Node, session string) int {
	t.Helper()
	events, err := n.Log().Read(context.Background(), session, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := 0
	for _, e := range events {
		if e.Type == messages.TypeTaskSubmitted {
			c++
		}
	}
	return c
}

// run_task with a task_id is idempotent by name: a client that calls it again
// with the same task_id (its first call timed out, its connection dropped) gets
// the answer of the one task, whether the task still runs (the second call waits
// for it beside the first) or ended (answered at once); the task is recorded and
// run once, its model asked once per step. The answer's _meta names the task.
func TestServerRunTaskTaskID(t *testing.T) {
	for _, over := range []string{"memory", "http"} {
		t.Run(over, func(t *testing.T) {
			m := newGateModel(answerScript(t, "forty-two"))
			n := nodetest.Start(t, node.Config{Model: m, Tools: []tools.Tool{tools.Calculator{}}})
			srv := mcp.NewServer(n, mcp.ServerOptions{})
			progress := make(chan string, 256)
			cs := serveBoth(t, over, n, srv, &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
				if req.Params.ProgressToken == "second" {
					progress <- req.Params.Message
				}
			}})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args := map[string]any{"input": "what is 6*7?", "session_id": "s-named", "task_id": "q-1"}
			type answer struct {
				res *sdk.CallToolResult
				err error
			}
			call := func(token string) <-chan answer {
				c := make(chan answer, 1)
				go func() {
					p := &sdk.CallToolParams{Name: mcp.RunTask, Arguments: args}
					if token != "" {
						p.SetProgressToken(token)
					}
					res, err := cs.CallTool(ctx, p)
					c <- answer{res, err}
				}()
				return c
			}
			wait := func(c <-chan struct{}, what string) {
				t.Helper()
				select {
				case <-c:
				case <-ctx.Done():
					t.Fatalf("%s: not within a minute", what)
				}
			}
			check := func(a answer, which string) {
				t.Helper()
				if a.err != nil || a.res.IsError || answerText(a.res) != "forty-two" ||
					a.res.Meta[mcp.SessionIDMeta] != "s-named" || a.res.Meta[mcp.TaskIDMeta] != "q-1" {
					t.Fatalf("%s run_task: %v %+v %q", which, a.err, a.res, answerText(a.res))
				}
			}

			first := call("")
			select {
			case <-m.asked:
			case a := <-first:
				t.Fatalf("run_task answered before its task's first step: %v %+v %q", a.err, a.res, answerText(a.res))
			case <-ctx.Done():
				t.Fatal("the model was not asked within a minute")
			}
			// The second call comes while the task runs (its model step waits).
			second := call("second")
			select {
			case <-progress: // the second call is being served
			case a := <-second:
				t.Fatalf("the second run_task answered while its task ran: %v %+v %q", a.err, a.res, answerText(a.res))
			case <-ctx.Done():
				t.Fatal("the second run_task was not served within a minute")
			}
			m.release <- struct{}{}
			wait(m.asked, "the model asked for the second step")
			m.release <- struct{}{}
			var a1, a2 answer
			for _, c := range []struct {
				ch <-chan answer
				to *answer
			}{{first, &a1}, {second, &a2}} {
				select {
				case *c.to = <-c.ch:
				case <-ctx.Done():
					t.Fatal("run_task did not answer within a minute")
				}
			}
			check(a1, "first")
			check(a2, "second (while the task ran)")

			// A third call after the task ended answers its result at once.
			select {
			case a := <-call(""):
				check(a, "third (after the task ended)")
			case <-ctx.Done():
				t.Fatal("run_task of an ended task did not answer within a minute")
			}
			// task_result names the task too.
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: mcp.TaskResult, Arguments: map[string]any{"session_id": "s-named"}})
			if err != nil || res.IsError || answerText(res) != "forty-two" || res.Meta[mcp.TaskIDMeta] != "q-1" {
				t.Errorf("task_result: %v %+v %q", err, res, answerText(res))
			}
			if got := m.calls.Load(); got != 2 {
				t.Errorf("the model was called %d times, want 2 (one task of two steps)", got)
			}
			if got := submittedTasks(t, n, "s-named"); got != 1 {
				t.Errorf("%d task.submitted events in session s-named, want 1", got)
			}

			// A task_id without a session names the session: sent again, it is
			// the same task of the same session.
			close(m.free)
			for i := range 2 {
				res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: mcp.RunTask, Arguments: map[string]any{"input": "again?", "task_id": "q-2"}})
				if err != nil || res.IsError || answerText(res) != "forty-two" || res.Meta[mcp.SessionIDMeta] != "task.q-2" || res.Meta[mcp.TaskIDMeta] != "q-2" {
					t.Fatalf("run_task %d without a session: %v %+v %q", i+1, err, res, answerText(res))
				}
			}
			if got := m.calls.Load(); got != 4 {
				t.Errorf("the model was called %d times in all, want 4 (two tasks of two steps)", got)
			}
			if got := submittedTasks(t, n, "task.q-2"); got != 1 {
				t.Errorf("%d task.submitted events in session task.q-2, want 1", got)
			}
		})
	}
}

// A task_id the ingress refuses (too long, a character outside the rule, empty,
// not a string, null as in a task body, the shape of a credential) is a tool error that names task_id, and
// runs nothing.
func TestServerRunTaskBadTaskID(t *testing.T) {
	for _, over := range []string{"memory", "http"} {
		t.Run(over, func(t *testing.T) {
			m := newGateModel(answerScript(t, "unused"))
			close(m.free)
			n := nodetest.Start(t, node.Config{Model: m, Tools: []tools.Tool{tools.Calculator{}}})
			cs := serveBoth(t, over, n, mcp.NewServer(n, mcp.ServerOptions{}), nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, c := range []struct {
				name string
				id   any
				want string
			}{
				{"too long", strings.Repeat("q", 129), "task_id \"qqqq"},
				{"a control character", "q\x01-1", `task_id "q\x01-1": must be ` + node.TaskIDRule},
				{"a newline", "q\n1", `task_id "q\n1": must be ` + node.TaskIDRule},
				{"empty", "", "task_id is empty: it must be " + node.TaskIDRule},
				{"a number", 42, `field "task_id" must be a string`},
				{"null", nil, "task_id must be a string (" + node.TaskIDRule + "), or left out; got null"},
				{"the shape of a credential", "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD", "task_id \"[REDACTED"},
			} {
				res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: mcp.RunTask, Arguments: map[string]any{"input": "hi", "session_id": "s-bad", "task_id": c.id}})
				if err != nil || !res.IsError || !strings.Contains(answerText(res), c.want) {
					t.Errorf("run_task with a task_id that is %s: %v %q, want a tool error with %q", c.name, err, answerText(res), c.want)
				}
			}
			if got := m.calls.Load(); got != 0 {
				t.Errorf("the model was called %d times, want 0", got)
			}
			if got := submittedTasks(t, n, "s-bad"); got != 0 {
				t.Errorf("%d task.submitted events in session s-bad, want 0", got)
			}
		})
	}
}

// A client whose run_task call with a task_id ends early (its timeout: the SDK
// sends notifications/cancelled) leaves the task running, and calling again with
// the task_id gets its answer: the task runs once.
func TestServerRunTaskTaskIDAfterATimeout(t *testing.T) {
	for _, over := range []string{"memory", "http"} {
		t.Run(over, func(t *testing.T) {
			m := newGateModel(answerScript(t, "forty-two"))
			n := nodetest.Start(t, node.Config{Model: m, Tools: []tools.Tool{tools.Calculator{}}})
			cs := serveBoth(t, over, n, mcp.NewServer(n, mcp.ServerOptions{}), nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args := map[string]any{"input": "what is 6*7?", "task_id": "slow-1"}
			first, timeout := context.WithCancel(ctx)
			gone := make(chan error, 1)
			go func() {
				_, err := cs.CallTool(first, &sdk.CallToolParams{Name: mcp.RunTask, Arguments: args})
				gone <- err
			}()
			select {
			case <-m.asked:
			case err := <-gone:
				t.Fatalf("run_task answered before its task's first step: %v", err)
			case <-ctx.Done():
				t.Fatal("the model was not asked within a minute")
			}
			timeout()
			select {
			case <-gone:
			case <-ctx.Done():
				t.Fatal("the cancelled call did not return within a minute")
			}
			close(m.free)
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: mcp.RunTask, Arguments: args})
			if err != nil || res.IsError || answerText(res) != "forty-two" || res.Meta[mcp.TaskIDMeta] != "slow-1" {
				t.Fatalf("run_task again: %v %+v %q", err, res, answerText(res))
			}
			if got := m.calls.Load(); got != 2 {
				t.Errorf("the model was called %d times, want 2 (one task of two steps)", got)
			}
			if got := submittedTasks(t, n, "task.slow-1"); got != 1 {
				t.Errorf("%d task.submitted events in session task.slow-1, want 1", got)
			}
		})
	}
}

// answerText is textOf(r), or says there is no result (the call failed).
func answerText(r *sdk.CallToolResult) string {
	if r == nil {
		return "<no result>"
	}
	return textOf(r)
}
