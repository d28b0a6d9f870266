package node_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// POST /v1/sessions/{id}/cancel naming a task (task_id) is idempotent: sent
// again after the task ended cancelled (its 202 lost on the way), it is answered
// 202 as it was, and nothing more is recorded (before, 409: "it ended, or is
// unknown", and the client could not tell its cancellation had been done). A
// cancellation naming a task that completed is still 409.
func TestHTTPCancelByTaskIDSentAgainIsAccepted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	model := &heldEcho{held: make(chan struct{}), release: make(chan struct{})}
	defer close(model.release)
	n := nodetest.Start(t, node.Config{Model: model})
	api := httptest.NewServer(n.Handler())
	t.Cleanup(api.Close)
	const session = "cancel-again"
	if _, err := n.RunTask(ctx, node.Task{Input: "first", SessionID: session, TaskID: "done-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Submit(ctx, node.Task{Input: "hold on", SessionID: session, TaskID: "held-2"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-model.held:
	case <-ctx.Done():
		t.Fatal("the held task's model call was never made")
	}
	url := api.URL + "/v1/sessions/" + session + "/cancel"
	for i := range 2 {
		if code, msg := postJSON(t, url, `{"task_id":"held-2","reason":"no longer needed"}`); code != http.StatusAccepted {
			t.Fatalf("cancel %d of the task: %d %s, want 202", i+1, code, msg)
		}
	}
	events := waitEnded(t, n, session)
	if got := countType(events, messages.TypeTaskFailed); got != 1 {
		t.Fatalf("%d task.failed after the cancellation sent twice, want 1: %s", got, eventTypes(events))
	}
	if code, msg := postJSON(t, url, `{"task_id":"done-1"}`); code != http.StatusConflict {
		t.Fatalf("cancel of a task that completed: %d %s, want 409", code, msg)
	}
	if code, msg := postJSON(t, url, ``); code != http.StatusConflict {
		t.Fatalf("cancel without a task_id of the idle session: %d %s, want 409", code, msg)
	}
}
