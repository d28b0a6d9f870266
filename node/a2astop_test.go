package node_test

import (
	"context"
	"errors"
	"iter"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A node that stops serving (SIGTERM: node serve shuts its HTTP server down)
// ends the A2A streams open on it at once, as it ends its other live streams:
// the official Go client's message/stream ends with an error saying so (the task
// goes on: tasks/resubscribe takes it up again), not as a task's stream ends; a blocking
// message/send in flight answers the task as it stands (working), as a
// non-blocking one does; the client reads or resubscribes to it where it goes
// on. The shutdown waited out its whole timeout for them, then cut them (curl:
// "transfer closed with outstanding read data remaining"), and the sessions
// began to drain only then. Nothing is lost: the tasks run on, each to its end,
// once.
func TestA2AStreamsEndWhenTheNodeStopsServing(t *testing.T) {
	m := &gateModel{release: make(chan struct{})}
	n := nodetest.Start(t, node.Config{Model: m, A2A: &node.A2AConfig{}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := n.HTTPServer()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	client, _ := a2aClient(t, "http://"+ln.Addr().String(), a2a.CardPath)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	next, stop := iter.Pull2(client.SendStreamingMessage(ctx, &sdk.MessageSendParams{Message: userMessage("hold")}))
	defer stop()
	var streamed sdk.TaskID
	for {
		ev, err, ok := next()
		if err != nil || !ok {
			t.Fatalf("message/stream before the shutdown: %v (more: %v)", err, ok)
		}
		if task, isTask := ev.(*sdk.Task); isTask {
			streamed = task.ID
		}
		if st, isStatus := ev.(*sdk.TaskStatusUpdateEvent); isStatus && st.Status.State == sdk.TaskStateWorking {
			break
		}
	}
	type sent struct {
		res sdk.SendMessageResult
		err error
	}
	blocked := make(chan sent, 1)
	go func() {
		res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("hold")})
		blocked <- sent{res, err}
	}()
	waitFor(t, 20*time.Second, "both tasks' model calls", func() bool { return m.calls("hold") == 2 })

	shut, cancelShut := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelShut()
	if err := srv.Shutdown(shut); err != nil {
		t.Errorf("shutdown with an A2A stream and a blocking message/send open: %v, want them ended at once", err)
	}
	var errs []error
	for {
		ev, err, ok := next()
		if !ok {
			break
		}
		if err != nil {
			errs = append(errs, err)
		}
		if st, isStatus := ev.(*sdk.TaskStatusUpdateEvent); isStatus && st.Status.State.Terminal() {
			t.Errorf("message/stream at the shutdown: %s, want the task still running", st.Status.State)
		}
	}
	if len(errs) != 1 || !errors.Is(errs[0], sdk.ErrInternalError) || !strings.Contains(errs[0].Error(), "tasks/resubscribe") {
		t.Errorf("message/stream at the shutdown: errors %v, want one saying the stream ends and how to take the task up again", errs)
	}
	var held sdk.TaskID
	select {
	case s := <-blocked:
		task, ok := s.res.(*sdk.Task)
		if s.err != nil || !ok || task.Status.State.Terminal() {
			t.Fatalf("blocking message/send at the shutdown: %v %v, want the task as it stands", s.res, s.err)
		}
		held = task.ID
	case <-ctx.Done():
		t.Fatal("blocking message/send did not answer at the shutdown")
	}

	close(m.release)
	api := httptest.NewServer(n.Handler())
	defer api.Close()
	after, _ := a2aClient(t, api.URL, a2a.CardPath)
	for _, id := range []sdk.TaskID{streamed, held} {
		var got *sdk.Task
		waitFor(t, 20*time.Second, "task "+string(id)+" ended", func() bool {
			got, err = after.GetTask(ctx, &sdk.TaskQueryParams{ID: id})
			return err == nil && got.Status.State.Terminal()
		})
		if got.Status.State != sdk.TaskStateCompleted || artifactText(t, got) != "ok hold" {
			t.Errorf("task %s: %s %q, want it completed", id, got.Status.State, artifactText(t, got))
		}
	}
	if c := m.calls("hold"); c != 2 {
		t.Errorf("the model was asked %d times, want once per task", c)
	}
}

// A tasks/resubscribe open when the node stops serving ends at once, as a
// message/stream does: its last event the error saying the task goes on.
func TestA2AResubscribeEndsWhenTheNodeStopsServing(t *testing.T) {
	m := &gateModel{release: make(chan struct{})}
	n := nodetest.Start(t, node.Config{Model: m, A2A: &node.A2AConfig{}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := n.HTTPServer()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	client, _ := a2aClient(t, "http://"+ln.Addr().String(), a2a.CardPath)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nonBlocking := false
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("hold"), Config: &sdk.MessageSendConfig{Blocking: &nonBlocking}})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*sdk.Task)
	if !ok {
		t.Fatalf("message/send answered %T", res)
	}
	waitFor(t, 20*time.Second, "the task's model call", func() bool { return m.calls("hold") == 1 })
	next, stop := iter.Pull2(client.ResubscribeToTask(ctx, &sdk.TaskIDParams{ID: task.ID}))
	defer stop()
	if _, err, ok := next(); err != nil || !ok {
		t.Fatalf("tasks/resubscribe before the shutdown: %v (more: %v)", err, ok)
	}
	shut, cancelShut := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelShut()
	if err := srv.Shutdown(shut); err != nil {
		t.Errorf("shutdown with a tasks/resubscribe open: %v, want it ended at once", err)
	}
	var errs []error
	for {
		ev, err, ok := next()
		if !ok {
			break
		}
		if err != nil {
			errs = append(errs, err)
		}
		if st, isStatus := ev.(*sdk.TaskStatusUpdateEvent); isStatus && st.Status.State.Terminal() {
			t.Errorf("tasks/resubscribe at the shutdown: %s, want the task still running", st.Status.State)
		}
	}
	if len(errs) != 1 || !errors.Is(errs[0], sdk.ErrInternalError) || !strings.Contains(errs[0].Error(), "tasks/resubscribe") {
		t.Errorf("tasks/resubscribe at the shutdown: errors %v, want one saying the stream ends", errs)
	}
	close(m.release)
}
