package node_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/node"
)

// An A2A message to a session whose queue is full (MaxQueuedTasks) is answered
// with InternalError (-32603) whose data says too many tasks wait and to send
// it again, sent or streamed, and may be sent again. (The SDK turned the refusal of a
// task claimed before its execution into a failed task without its reason, and
// the claim stayed: the message sent again answered that failed task.)
func TestA2AMessagePastMaxQueuedTasksSaysTheQueueIsFull(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	model := &heldEcho{held: make(chan struct{}), release: make(chan struct{})}
	released := false
	defer func() {
		if !released {
			close(model.release)
		}
	}()
	_, base := a2aNode(t, node.Config{Model: model, MaxQueuedTasks: 1})
	post := func(path, body string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return string(raw)
	}
	post("/v1/tasks", `{"input":"hold on","session_id":"s-a2a-queue","task_id":"run"}`)
	select {
	case <-model.held:
	case <-ctx.Done():
		t.Fatal("the first task's model call was never made")
	}
	post("/v1/tasks", `{"input":"next","session_id":"s-a2a-queue","task_id":"q1"}`)
	for _, method := range []string{"message/send", "message/stream"} {
		msg := map[string]any{"messageId": "m-" + method, "contextId": "s-a2a-queue", "kind": "message", "role": "user",
			"parts": []any{map[string]any{"kind": "text", "text": "one more"}}}
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": map[string]any{"message": msg}})
		answer := post("/a2a", string(body))
		for _, line := range strings.Split(answer, "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				answer = d // the stream's one event: the error
			}
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
			t.Fatalf("%s: %s, want an error", method, answer)
		}
		if out.Error.Code != -32603 || !strings.Contains(out.Error.Data.Error, "too many tasks wait their turn") || !strings.Contains(out.Error.Data.Error, "send the message again") {
			t.Errorf("%s: %+v, want -32603 saying too many tasks wait and to send the message again", method, *out.Error)
		}
	}
	// The refused message was never a task: sent again once the queue has room,
	// it starts one, rather than answering the refusal again.
	close(model.release)
	released = true
	var tail string
	for range 100 {
		msg := map[string]any{"messageId": "m-message/send", "contextId": "s-a2a-queue", "kind": "message", "role": "user",
			"parts": []any{map[string]any{"kind": "text", "text": "one more"}}}
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "message/send", "params": map[string]any{"message": msg, "configuration": map[string]any{"blocking": false}}})
		tail = post("/a2a", string(body))
		t.Logf("sent again: %s", tail)
		if !strings.Contains(tail, "too many tasks wait their turn") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(tail, `"result"`) || strings.Contains(tail, `"failed"`) {
		t.Errorf("the refused message sent again: %s, want a task taken", tail)
	}
}
