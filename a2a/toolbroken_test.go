package a2a_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/tools"
)

// A stream that breaks after it named its task — the agent killed mid-answer
// (the connection cut before the stream's end), or stopping and saying so (an
// error event, as a Troupe node's stop ends its streams) — leaves a task that
// runs on at the agent, or where its next run resumes it: the tool follows it
// with tasks/get, as it follows a stream that closed early, and the call
// answers with the finished task. The call failed at once with the stream's
// error, and the remote task's answer was lost to the model, which could only
// ask again: a second remote task.
func TestToolFollowsATaskWhoseStreamBroke(t *testing.T) {
	for name, cut := range map[string]func(w http.ResponseWriter, id json.RawMessage){
		"connection cut": func(w http.ResponseWriter, _ json.RawMessage) {
			panic(http.ErrAbortHandler) // the connection closes mid-stream
		},
		"the agent stops": func(w http.ResponseWriter, id json.RawMessage) {
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":-32603,\"message\":\"the server stops serving\"}}\n\n", id)
		},
	} {
		t.Run(name, func(t *testing.T) {
			var gets atomic.Int32
			ra := newRemoteAgent(t, true, map[string]rpcAnswer{
				"message/stream": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) {
					sse(w, id, workingTask)
					cut(w, id)
				},
				"tasks/get": getsUntilDone(1, &gets),
			})
			out, err := ra.tool(t, nil).Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"message":"long job"}`})
			if err != nil || out != "done at last\n\n(context_id: c-1)" {
				t.Fatalf("Call = %q, %v; want the task followed to its end", out, err)
			}
			if n := gets.Load(); n != 2 {
				t.Errorf("tasks/get asked %d times, want 2", n)
			}
		})
	}
}

// refusingDialer refuses the connections it is asked for while refuse is above
// zero (the agent's host is there, its process is not: it restarts), counting
// them down, then dials.
type refusingDialer struct {
	refuse atomic.Int32
	d      net.Dialer
}

func (r *refusingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if r.refuse.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	return r.d.DialContext(ctx, network, addr)
}

// An agent killed mid-answer and restarted (its task resumed by its next run)
// is not there for a while: tasks/get finds no connection more than the three
// times in a row that fail the call when the agent answers them with an error.
// The tool follows the task on while the agent is away (up to 30 s in a row,
// within the call's timeout), and the call answers with the finished task; it
// failed after the third refused connection, a second or so after the cut.
func TestToolFollowsATaskThroughTheAgentsRestart(t *testing.T) {
	var gets atomic.Int32
	dialer := &refusingDialer{}
	ra := newRemoteAgent(t, true, map[string]rpcAnswer{
		"message/stream": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) {
			sse(w, id, workingTask)
			dialer.refuse.Store(5) // the agent goes away
			panic(http.ErrAbortHandler)
		},
		"tasks/get": getsUntilDone(0, &gets),
	})
	hc := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true}}
	tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: ra.srv.URL + a2a.CardPath, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	out, err := tool.Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"message":"long job"}`})
	if err != nil || out != "done at last\n\n(context_id: c-1)" {
		t.Fatalf("Call = %q, %v; want the task followed through the agent's restart", out, err)
	}
	if left := dialer.refuse.Load(); left > 0 {
		t.Errorf("%d refused connections left: the agent never went away", left)
	}
}

// A task followed with tasks/get stays the one the stream named, in its context:
// an agent that answers with the task's ID in another context (a hostile one, or
// one whose store mixed two tasks up) fails the call. Its answer was taken, and
// its context_id handed to the model, which went on in that other context.
func TestToolRefusesAFollowedTaskOfAnotherContext(t *testing.T) {
	ra := newRemoteAgent(t, true, map[string]rpcAnswer{
		"message/stream": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) {
			sse(w, id, workingTask)
			panic(http.ErrAbortHandler)
		},
		"tasks/get": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) {
			rpcResult(w, id, `{"kind":"task","id":"t-1","contextId":"c-other","status":{"state":"completed"},
				"artifacts":[{"artifactId":"a","parts":[{"kind":"text","text":"someone else's answer"}]}]}`)
		},
	})
	out, err := ra.tool(t, nil).Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"message":"long job"}`})
	if err == nil || !strings.Contains(err.Error(), "c-other") {
		t.Fatalf("Call = %q, %v; want an error naming the other context", out, err)
	}
}

// An agent behind a reverse proxy (an ingress, a load balancer) that restarts is
// not there as the proxy says: 503 or 504 while no instance answers. The
// tool follows its task on through them as through refused connections (up to
// 30 s in a row); it failed the call at the third, a second or so after the
// agent went, though the agent's next run finished the task.
func TestToolFollowsATaskThroughTheAgentsRestartBehindAProxy(t *testing.T) {
	var gets, away atomic.Int32
	done := getsUntilDone(0, &gets)
	codes := []int{http.StatusServiceUnavailable, http.StatusGatewayTimeout}
	ra := newRemoteAgent(t, true, map[string]rpcAnswer{
		"message/stream": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) {
			sse(w, id, workingTask)
			away.Store(5) // the agent goes away
			panic(http.ErrAbortHandler)
		},
		"tasks/get": func(w http.ResponseWriter, r *http.Request, id, params json.RawMessage) {
			if n := away.Add(-1); n >= 0 {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(codes[int(n)%len(codes)])
				fmt.Fprint(w, "<html><body>no upstream</body></html>")
				return
			}
			done(w, r, id, params)
		},
	})
	out, err := ra.tool(t, nil).Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"message":"long job"}`})
	if err != nil || out != "done at last\n\n(context_id: c-1)" {
		t.Fatalf("Call = %q, %v; want the task followed through the agent's restart", out, err)
	}
	if left := away.Load(); left > 0 {
		t.Errorf("%d answers of the proxy left: the agent never went away", left)
	}
}
