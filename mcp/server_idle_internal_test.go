package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// echoNode offers one tool, echo, which answers with its arguments at once.
type echoNode struct{ calls atomic.Int64 }

func (*echoNode) ToolSpecs() []messages.ToolSpec {
	return []messages.ToolSpec{{Name: "echo", Description: "answers with its arguments", Parameters: json.RawMessage(`{"type":"object"}`)}}
}

func (e *echoNode) CallTool(_ context.Context, _, _, arguments string) (string, error) {
	e.calls.Add(1)
	return arguments, nil
}

func (*echoNode) RunTask(context.Context, node.Task) (messages.TaskResult, error) {
	return messages.TaskResult{}, errors.New("no tasks here")
}

// A session whose client's requests are on their way to the SDK's handler does
// not idle out: the server holds it from the moment it takes a request until it
// answered it. The SDK's handler held its idle timer only from its own lookup of
// the session on, so that a session that idled out between the server's taking of
// a request and the SDK's lookup answered 404 (the go-sdk's client failed the
// call with "session not found"), and one that idled out between the lookup and
// the SDK's taking of the call sent the call's priming event and never ran the
// call, its client waiting on the stream. Here every POST of the client's (its
// call, its answers to the server's pings on its stream of notifications) waits
// on its way twice the session timeout, with the go-sdk's client at its defaults.
func TestServerHTTPSessionWithARequestOnItsWayDoesNotIdleOut(t *testing.T) {
	const timeout = 300 * time.Millisecond
	e := &echoNode{}
	s := NewServer(e, ServerOptions{SessionTimeout: timeout})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var slow atomic.Bool
	s.admitted = func(r *http.Request) {
		if !slow.Load() || r.Method != http.MethodPost {
			return
		}
		select {
		case <-time.After(2 * timeout):
		case <-ctx.Done():
		}
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	slow.Store(true)
	for i := range 3 {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"n": i}})
		if err != nil || res.IsError {
			t.Fatalf("call %d: %v %v, want its answer", i, err, res)
		}
	}
	if got := e.calls.Load(); got != 3 {
		t.Errorf("the tool ran %d times, want 3", got)
	}
}

// A client without a stream of notifications (which answers no ping) that
// sends its calls about a session timeout apart gets each one answered: a call
// that comes as its session idles out finds the session held, or resumes it once
// closed. The SDK's handler closing the session itself, a call that came as it
// did got no answer ("request terminated without response"), or answered 400
// from a session the SDK's close forgot as it was resumed, after which the
// go-sdk's client failed for good (runs failed at the 9th call, at the 38th).
func TestServerHTTPCallsASessionTimeoutApartAreAnswered(t *testing.T) {
	const timeout = 50 * time.Millisecond
	e := &echoNode{}
	s := NewServer(e, ServerOptions{SessionTimeout: timeout})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: hs.URL, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	const calls = 60
	for i := range calls {
		// From a little less to a little more than the session timeout.
		time.Sleep(timeout - 3*time.Millisecond + time.Duration(i%7)*time.Millisecond)
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"n": i}})
		if err != nil || res.IsError {
			t.Fatalf("call %d: %v %v, want its answer", i, err, res)
		}
	}
	if got := e.calls.Load(); got != calls {
		t.Errorf("the tool ran %d times, want %d", got, calls)
	}
}
