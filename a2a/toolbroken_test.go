package a2a_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

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
