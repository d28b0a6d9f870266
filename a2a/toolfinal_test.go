package a2a_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/tools"
)

// A remote agent whose stream stays open after the task's final event (keep-alive
// comments, a proxy that holds the connection) has answered: the call returns the
// answer at that event, neither waiting for its timeout nor cancelling a task that
// completed.
func TestToolAnswersAtTheStreamsFinalEvent(t *testing.T) {
	ra := newRemoteAgent(t, true, map[string]rpcAnswer{
		"message/stream": func(w http.ResponseWriter, r *http.Request, id, _ json.RawMessage) {
			sse(w, id, workingTask,
				`{"kind":"artifact-update","taskId":"t-1","contextId":"c-1","artifact":{"artifactId":"a","parts":[{"kind":"text","text":"forty-two"}]}}`,
				`{"kind":"status-update","taskId":"t-1","contextId":"c-1","status":{"state":"completed"},"final":true}`)
			for {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(50 * time.Millisecond):
					fmt.Fprint(w, ": keep-alive\n\n")
					w.(http.Flusher).Flush()
				}
			}
		},
		"tasks/cancel": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32002,"message":"task cannot be canceled"}}`, id)
		},
	})
	tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: ra.srv.URL + a2a.CardPath, CallTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := tool.Call(context.Background(), tools.Call{Key: "s/final", Arguments: `{"message":"the answer?"}`})
	if err != nil || !strings.Contains(out, "forty-two") {
		t.Fatalf("Call = %q, %v; want the completed task's answer", out, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the call took %s: it waited past the final event", took)
	}
	ra.next(t) // message/stream
	select {
	case m := <-ra.methods:
		t.Errorf("after the final event the agent was asked %s", m)
	default:
	}
}
