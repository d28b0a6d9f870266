package node_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
)

// A message that would start no task (no text, an input over the node's 1 MiB, a
// context ID that is no session ID or has a credential's shape) is answered with
// InvalidParams (-32602) and why, in A2A 0.3 and 1.0, sent or streamed; no task
// is made and no session is written. (It used to start a task that failed at once,
// with no reason, as the SDK answers an executor's error.)
func TestA2ARefusesAMessageThatStartsNoTask(t *testing.T) {
	n, base := a2aNode(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: "x"})})
	cases := []struct {
		name, contextID, text, why string
	}{
		{"no text", "", "   ", "no text part"},
		{"too long", "", "echo " + strings.Repeat("x", 1<<20), "the limit is 1 MiB"},
		{"bad context", "not a session!", "hi", "session_id must be"},
		{"credential context", "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD", "hi", "shape of a credential"},
	}
	for _, c := range cases {
		for _, method := range []string{"message/send", "message/stream", "SendMessage", "SendStreamingMessage"} {
			v1 := !strings.Contains(method, "/")
			msg := map[string]any{"messageId": "m-" + c.name + "-" + method}
			if c.contextID != "" {
				msg["contextId"] = c.contextID
			}
			if v1 {
				msg["role"], msg["parts"] = "ROLE_USER", []any{map[string]any{"text": c.text}}
			} else {
				msg["kind"], msg["role"], msg["parts"] = "message", "user", []any{map[string]any{"kind": "text", "text": c.text}}
			}
			body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": map[string]any{"message": msg}})
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, base+"/a2a", strings.NewReader(string(body)))
			req.Header.Set("Content-Type", "application/json")
			if v1 {
				req.Header.Set(a2a.VersionHeader, "1.0")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answer := string(raw)
			if strings.Contains(resp.Header.Get("Content-Type"), "text/event-stream") {
				// One event: the error.
				var datas []string
				for _, line := range strings.Split(answer, "\n") {
					if d, ok := strings.CutPrefix(line, "data: "); ok {
						datas = append(datas, d)
					}
				}
				if len(datas) != 1 {
					t.Fatalf("%s, %s: %d events, want the error alone: %s", c.name, method, len(datas), answer)
				}
				answer = datas[0]
			}
			var out struct {
				Result any
				Error  *struct {
					Code    int
					Message string
					Data    struct{ Error string }
				}
			}
			if err := json.Unmarshal([]byte(answer), &out); err != nil || out.Error == nil || out.Result != nil {
				t.Fatalf("%s, %s: %s, want an error", c.name, method, answer)
			}
			why := out.Error.Data.Error
			if v1 {
				// A 1.0 client reads the message (the Python SDK shows nothing else).
				why = out.Error.Message
			}
			if out.Error.Code != -32602 || !strings.Contains(why, c.why) {
				t.Fatalf("%s, %s: %s, want -32602 saying %q", c.name, method, answer, c.why)
			}
		}
	}
	sessions, err := n.Log().Sessions(context.Background(), eventlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 0 {
		t.Fatalf("sessions written: %v", sessions)
	}
}
