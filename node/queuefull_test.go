package node_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A session holds at most MaxQueuedTasks tasks waiting behind its running one:
// the next is refused, 429 with Retry-After, and nothing of it is recorded; a
// task sent again (the same task_id) is still answered as the task it is. Before,
// every task was recorded and held in its session's state, without bound.
func TestTaskPastMaxQueuedTasksIsRefusedWith429(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	model := &heldEcho{held: make(chan struct{}), release: make(chan struct{})}
	defer close(model.release)
	n := nodetest.Start(t, node.Config{Model: model, MaxQueuedTasks: 2})
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	post := func(body string) (int, http.Header, string) {
		t.Helper()
		res, err := http.Post(srv.URL+"/v1/tasks", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(b)
	}
	if code, _, body := post(`{"input":"hold on","session_id":"s-queue-full","task_id":"run"}`); code != http.StatusAccepted {
		t.Fatalf("the first task: %d %s", code, body)
	}
	select {
	case <-model.held:
	case <-ctx.Done():
		t.Fatal("the first task's model call was never made")
	}
	for _, id := range []string{"q1", "q2", "q1"} {
		if code, _, body := post(`{"input":"next","session_id":"s-queue-full","task_id":"` + id + `"}`); code != http.StatusAccepted {
			t.Fatalf("task %s, within the bound or sent again: %d %s, want 202", id, code, body)
		}
	}
	code, h, body := post(`{"input":"next","session_id":"s-queue-full","task_id":"q3"}`)
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Fatalf("the task past the bound: %d (Retry-After %q) %s, want 429 with Retry-After", code, h.Get("Retry-After"), body)
	}
	events, err := n.Log().Read(ctx, "s-queue-full", 1)
	if err != nil {
		t.Fatal(err)
	}
	submitted := 0
	for _, e := range events {
		if e.Type == "task.submitted" {
			submitted++
		}
	}
	if submitted != 3 {
		t.Fatalf("%d tasks recorded, want 3 (the running one and two waiting)", submitted)
	}
}

// A task of troupe.tasks past its session's MaxQueuedTasks gets a rejected
// result saying so, and its record goes to troupe.poison: retried, it would hold
// its partition, every other session's on it, until the queue drained.
func TestKafkaTaskPastMaxQueuedTasksGetsARejectedResult(t *testing.T) {
	k := newKafkaEnv(t)
	model := &heldEcho{held: make(chan struct{}), release: make(chan struct{})}
	defer close(model.release)
	k.nodeWith(t, node.Config{Model: model, MaxQueuedTasks: 1})
	session := "queue-full-" + time.Now().Format("150405.000000")
	k.produce(t,
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"hold on","task_id":"run"}`)},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"next","task_id":"q1"}`)},
		kgo.Message{Key: []byte(session), Value: []byte(`{"input":"next","task_id":"q2"}`)},
	)
	res, ok := waitTaskResult(t, k, session, "q2", 30*time.Second)
	if !ok {
		t.Fatal("no result of the task past the bound")
	}
	if res.Status != messages.StatusFailed || res.Reason != messages.ReasonRejected || !strings.Contains(res.Error, "wait") {
		t.Fatalf("result of the task past the bound: %+v, want it rejected, saying the session's tasks wait", res)
	}
}
