package a2a_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/tools"
)

// rpcResult answers a JSON-RPC request with result.
func rpcResult(w http.ResponseWriter, id json.RawMessage, result string) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, id, result)
}

// getsUntilDone answers tasks/get for t-1 with workingTask the first working
// times, then with the task completed; gets counts them.
func getsUntilDone(working int32, gets *atomic.Int32) rpcAnswer {
	return func(w http.ResponseWriter, _ *http.Request, id, params json.RawMessage) {
		var p struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(params, &p)
		if p.ID != "t-1" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32001,"message":"no task %s"}}`, id, p.ID)
			return
		}
		if gets.Add(1) <= working {
			rpcResult(w, id, workingTask)
			return
		}
		rpcResult(w, id, `{"kind":"task","id":"t-1","contextId":"c-1","status":{"state":"completed"},
			"artifacts":[{"artifactId":"a","parts":[{"kind":"text","text":"done at last"}]}]}`)
	}
}

// A blocking message/send that the agent answers before its task ends (its own
// bound on blocking, or an agent that does not block) is followed with
// tasks/get until the task ends: the call answers with the finished task. Before,
// the call failed saying the task "ended working" while it ran on at the agent.
func TestToolFollowsATaskStillWorkingWhenMessageSendAnswers(t *testing.T) {
	var gets atomic.Int32
	ra := newRemoteAgent(t, false, map[string]rpcAnswer{
		"message/send": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) { rpcResult(w, id, workingTask) },
		"tasks/get":    getsUntilDone(2, &gets),
	})
	out, err := ra.tool(t, nil).Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"message":"long job"}`})
	if err != nil || out != "done at last\n\n(context_id: c-1)" {
		t.Fatalf("Call = %q, %v", out, err)
	}
	var asked []string
	for range 4 {
		asked = append(asked, ra.next(t))
	}
	if strings.Join(asked, ",") != "message/send,tasks/get,tasks/get,tasks/get" {
		t.Fatalf("the agent was asked %v", asked)
	}
}

// A stream that closes before its final event (a proxy's idle timeout, the agent
// restarting) leaves a task the tool follows with tasks/get, not a failed call.
func TestToolFollowsATaskWhoseStreamEndedEarly(t *testing.T) {
	var gets atomic.Int32
	ra := newRemoteAgent(t, true, map[string]rpcAnswer{
		"message/stream": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) { sse(w, id, workingTask) },
		"tasks/get":      getsUntilDone(1, &gets),
	})
	out, err := ra.tool(t, nil).Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"message":"long job"}`})
	if err != nil || out != "done at last\n\n(context_id: c-1)" {
		t.Fatalf("Call = %q, %v", out, err)
	}
	if gets.Load() != 2 {
		t.Fatalf("tasks/get asked %d times, want 2", gets.Load())
	}
}

// A task followed past the call's timeout is cancelled at the agent, as a call
// that times out waiting for its answer is; a tasks/get that keeps failing fails
// the call saying so, and one failure alone does not.
func TestToolFollowingATaskEnds(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		var gets atomic.Int32
		ra := newRemoteAgent(t, false, map[string]rpcAnswer{
			"message/send": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) { rpcResult(w, id, workingTask) },
			"tasks/get":    getsUntilDone(1<<30, &gets),
			"tasks/cancel": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) { rpcResult(w, id, canceled) },
		})
		tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: ra.srv.URL + a2a.CardPath, CallTimeout: 900 * time.Millisecond,
			CancelRemote: func(error) bool { return true }})
		if err != nil {
			t.Fatal(err)
		}
		_, err = tool.Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"message":"forever"}`})
		if err == nil || !strings.Contains(err.Error(), "did not answer within 900ms") {
			t.Fatalf("Call's error = %v, want the call's timeout", err)
		}
		for m := ra.next(t); m != "tasks/cancel"; m = ra.next(t) {
			if m != "message/send" && m != "tasks/get" {
				t.Fatalf("the agent was asked %s", m)
			}
		}
	})
	t.Run("tasks/get failing", func(t *testing.T) {
		var gets atomic.Int32
		ra := newRemoteAgent(t, false, map[string]rpcAnswer{
			"message/send": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) { rpcResult(w, id, workingTask) },
			"tasks/get": func(w http.ResponseWriter, _ *http.Request, _, _ json.RawMessage) {
				gets.Add(1)
				http.Error(w, "gone", http.StatusBadGateway)
			},
		})
		_, err := ra.tool(t, nil).Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"message":"x"}`})
		if err == nil || !strings.Contains(err.Error(), "following task t-1 (tasks/get, 3 times in a row)") || gets.Load() != 3 {
			t.Fatalf("Call's error = %v after %d tasks/get; want it to say tasks/get failed 3 times", err, gets.Load())
		}
	})
	t.Run("tasks/get failing once", func(t *testing.T) {
		var gets atomic.Int32
		done := getsUntilDone(0, &gets)
		ra := newRemoteAgent(t, false, map[string]rpcAnswer{
			"message/send": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) { rpcResult(w, id, workingTask) },
			"tasks/get": func(w http.ResponseWriter, r *http.Request, id, params json.RawMessage) {
				if gets.Load() == 0 {
					gets.Add(1)
					http.Error(w, "restarting", http.StatusServiceUnavailable)
					return
				}
				done(w, r, id, params)
			},
		})
		out, err := ra.tool(t, nil).Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"message":"x"}`})
		if err != nil || !strings.HasPrefix(out, "done at last") {
			t.Fatalf("Call = %q, %v", out, err)
		}
	})
	t.Run("artifacts too large", func(t *testing.T) {
		ra := newRemoteAgent(t, false, map[string]rpcAnswer{
			"message/send": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) { rpcResult(w, id, workingTask) },
			"tasks/get": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) {
				rpcResult(w, id, `{"kind":"task","id":"t-1","contextId":"c-1","status":{"state":"working"},
					"artifacts":[{"artifactId":"a","parts":[{"kind":"text","text":"`+strings.Repeat("x", 2000)+`"}]}]}`)
			},
			"tasks/cancel": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) { rpcResult(w, id, canceled) },
		})
		tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: ra.srv.URL + a2a.CardPath, MaxAnswerBytes: 1000})
		if err != nil {
			t.Fatal(err)
		}
		_, err = tool.Call(context.Background(), tools.Call{Key: "s/4", Arguments: `{"message":"x"}`})
		if !errors.Is(err, a2a.ErrAnswerTooLarge) {
			t.Fatalf("Call's error = %v, want ErrAnswerTooLarge", err)
		}
		for m := ra.next(t); m != "tasks/cancel"; m = ra.next(t) {
		}
	})
}
