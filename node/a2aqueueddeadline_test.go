package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A message's metadata may give its task a deadline (deadline_ms, as a task
// POSTed to /v1/tasks does): a message sent in a context whose task runs waits
// its turn, and fails at its deadline while it waits (decision rules 10): its
// stream ends failed, reason deadline, and tasks/get says so, while the running
// task goes on to its end. (The key was not read: an A2A task had no deadline,
// and waited behind the running one for as long as it ran.)
func TestA2AQueuedTaskFailsAtItsDeadline(t *testing.T) {
	model := &heldEcho{held: make(chan struct{}), release: make(chan struct{})}
	n, base := a2aNode(t, node.Config{Model: model})
	client, _ := a2aClient(t, base, a2a.CardPath)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	defer func() {
		select {
		case <-model.release:
		default:
			close(model.release)
		}
	}()
	blocking := false
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("first, hold"), Config: &sdk.MessageSendConfig{Blocking: &blocking}})
	if err != nil {
		t.Fatal(err)
	}
	first := res.(*sdk.Task)
	select {
	case <-model.held:
	case <-ctx.Done():
		t.Fatal("the first task's model call was never made")
	}
	second := userMessage("second")
	second.ContextID = first.ContextID
	second.Metadata = map[string]any{"deadline_ms": 300}
	type streamed struct {
		task, end string
		state     sdk.TaskState
		finals    int
		err       error
	}
	done := make(chan streamed, 1)
	go func() {
		var s streamed
		for ev, err := range client.SendStreamingMessage(ctx, &sdk.MessageSendParams{Message: second}) {
			if err != nil {
				s.err = err
				break
			}
			switch v := ev.(type) {
			case *sdk.Task:
				s.task = string(v.ID)
			case *sdk.TaskStatusUpdateEvent:
				s.state = v.Status.State
				if v.Final || v.Status.State.Terminal() {
					s.finals++
				}
				if v.Status.Message != nil {
					s.end = partsOf(v.Status.Message)
				}
			}
		}
		done <- s
	}()
	var s streamed
	select {
	case s = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the queued message's stream did not end at its 300 ms deadline (it waits for the running task)")
	}
	if s.err != nil || s.state != sdk.TaskStateFailed || !strings.HasPrefix(s.end, string(messages.ReasonDeadline)) || s.finals != 1 {
		t.Fatalf("the queued message's stream: %+v, want it failed once, reason deadline", s)
	}
	got, err := client.GetTask(ctx, &sdk.TaskQueryParams{ID: sdk.TaskID(s.task)})
	if err != nil || got.Status.State != sdk.TaskStateFailed || got.Status.Message == nil || !strings.HasPrefix(partsOf(got.Status.Message), string(messages.ReasonDeadline)) {
		t.Fatalf("tasks/get of the queued task: %+v, %v, want it failed, reason deadline", got, err)
	}
	if cur, err := client.GetTask(ctx, &sdk.TaskQueryParams{ID: first.ID}); err != nil || cur.Status.State != sdk.TaskStateWorking {
		t.Fatalf("tasks/get of the running task: %+v, %v, want it working still", cur, err)
	}
	close(model.release)
	waitFor(t, 30*time.Second, "the first task completed, the second failed", func() bool {
		events, err := n.Log().Read(ctx, first.ContextID, 1)
		sub, completed, failed := tasksOf(events)
		return err == nil && sub == 2 && completed == 1 && failed == 1
	})
	got, err = client.GetTask(ctx, &sdk.TaskQueryParams{ID: first.ID})
	if err != nil || got.Status.State != sdk.TaskStateCompleted || artifactText(t, got) != "answer to first, hold" {
		t.Fatalf("tasks/get of the first task: %+v, %v, want it completed with its answer", got, err)
	}
}

// A deadline_ms that is not a whole number of milliseconds between 1 and 30 days
// is -32602 naming it, and starts no task, as the budget's keys are.
func TestA2ADeadlineMetadataRefused(t *testing.T) {
	n, base := a2aNode(t, node.Config{Model: &heldEcho{held: make(chan struct{}), release: make(chan struct{})}})
	client, _ := a2aClient(t, base, a2a.CardPath)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, v := range []any{"300", 1.5, -1, float64(31 * 24 * 3600 * 1000)} {
		m := userMessage("hello")
		m.ContextID = "deadline-refused"
		m.Metadata = map[string]any{"deadline_ms": v}
		_, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: m})
		if err == nil || !strings.Contains(err.Error(), "deadline_ms") {
			t.Errorf("deadline_ms %v: %v, want InvalidParams naming deadline_ms", v, err)
		}
	}
	if events, _ := n.Log().Read(ctx, "deadline-refused", 1); len(events) != 0 {
		t.Fatalf("refused messages recorded %d events", len(events))
	}
}
