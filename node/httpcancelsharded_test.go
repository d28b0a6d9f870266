package node_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A sharded node's POST /v1/sessions/{id}/cancel naming a task (task_id) decides
// what it can from the session's log and sends the rest to the session's owner
// naming the task, as RunTask's and A2A's cancellations do. A task the log shows
// ended is answered 409 and nothing is published (before, the cancellation went
// out and was answered 202 whenever another task ran). A task not recorded yet,
// here the first of a new session published just before, gets its cancellation
// published naming it, which its owner reads after it (before, 404: the task ran
// with nothing to cancel it). Another session's task is sent to this session's
// owner, which does not hold it: nothing tells the client it exists. A task that
// ended cancelled is answered 202, as the cancellation that ended it was.
func TestShardedHTTPCancelByTaskIDGoesToTheOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := sharedLog(t)
	model := &heldEcho{held: make(chan struct{}), release: make(chan struct{})}
	defer close(model.release)
	owner := nodetest.Start(t, node.Config{Model: model, Log: log})
	if _, err := owner.RunTask(ctx, node.Task{Input: "first", SessionID: "s-http-cancel", TaskID: "done-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Submit(ctx, node.Task{Input: "hold on", SessionID: "s-http-cancel", TaskID: "held-2"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-model.held:
	case <-ctx.Done():
		t.Fatal("the held task's model call was never made")
	}

	bus := node.NewEmbeddedBus(watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	tasks, err := bus.Subscribe(ctx, messages.TopicTasks)
	if err != nil {
		t.Fatal(err)
	}
	api, err := node.New(ctx, node.Config{DataDir: t.TempDir(), Log: log, Roles: node.RoleClient,
		Bus: &node.Bus{Publisher: bus, Tasks: bus, Live: bus, Sharded: true, Partition: func(string, int) int { return 0 }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Close() })
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)

	post := func(session, body string) (int, string) {
		t.Helper()
		res, err := http.Post(srv.URL+"/v1/sessions/"+session+"/cancel", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	// The embedded bus's Publish waits for the subscriber's ack.
	acked := make(chan *message.Message, 16)
	go func() {
		for msg := range tasks {
			msg.Ack()
			acked <- msg
		}
	}()
	published := func() *message.Message {
		select {
		case msg := <-acked:
			return msg
		case <-time.After(300 * time.Millisecond):
			return nil
		}
	}
	wantCancel := func(session, task string) {
		t.Helper()
		msg := published()
		if msg == nil {
			t.Fatalf("no cancellation of task %s of %s was published", task, session)
		}
		c, err := messages.DecodeCancelRequest(msg.Payload)
		if err != nil || c.SessionID != session || c.TaskID != task {
			t.Fatalf("published %+v, %v; want the cancellation of task %s of %s", c, err, task, session)
		}
	}

	if code, body := post("s-http-cancel", `{"task_id":"done-1"}`); code != http.StatusConflict {
		t.Fatalf("cancel of a task that ended: %d %s, want 409", code, body)
	}
	if msg := published(); msg != nil {
		t.Fatalf("a cancellation of a task that ended was published: %s", msg.Payload)
	}
	if code, body := post("s-http-cancel", `{"task_id":"held-2"}`); code != http.StatusAccepted {
		t.Fatalf("cancel of the running task: %d %s, want 202", code, body)
	}
	wantCancel("s-http-cancel", "held-2")
	// The first task of a new session, published and not recorded yet.
	if code, body := post("s-http-cancel-new", `{"task_id":"on-its-way"}`); code != http.StatusAccepted {
		t.Fatalf("cancel of a task not recorded yet: %d %s, want 202", code, body)
	}
	wantCancel("s-http-cancel-new", "on-its-way")
	// Without a task_id, a session without events is still unknown.
	if code, body := post("s-http-cancel-none", ``); code != http.StatusNotFound {
		t.Fatalf("cancel of a session without events: %d %s, want 404", code, body)
	}
	// Another session's task: sent to this session's owner, which holds no such
	// task; the answer is the one an unknown ID gets.
	if code, body := post("s-http-cancel-new", `{"task_id":"held-2"}`); code != http.StatusAccepted {
		t.Fatalf("cancel of another session's task: %d %s, want 202 as for any task not in the log", code, body)
	}
	wantCancel("s-http-cancel-new", "held-2")
	// The held task, cancelled on its owner: the cancellation sent again (its
	// 202 lost) is answered as it was, and nothing is published.
	if err := owner.Cancel(ctx, "s-http-cancel", "no longer needed"); err != nil {
		t.Fatal(err)
	}
	if code, body := post("s-http-cancel", `{"task_id":"held-2"}`); code != http.StatusAccepted {
		t.Fatalf("cancel of a task that ended cancelled: %d %s, want 202", code, body)
	}
	if msg := published(); msg != nil {
		t.Fatalf("a cancellation of a task that ended cancelled was published: %s", msg.Payload)
	}
	if code, body := post("s-http-cancel", `{"task_id":"done-1"}`); code != http.StatusConflict {
		t.Fatalf("cancel of a task that completed: %d %s, want 409", code, body)
	}
}
