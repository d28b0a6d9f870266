package node_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A message to a task waiting for approval that is neither an approval nor a
// rejection is refused (-32602, saying what the task takes), by message/send and
// message/stream alike: the task still waits, and a later "approve" goes on with
// it. It used to fail the task, with no reason, and the call waited for an answer
// no A2A message could give any more.
func TestA2AUnreadableAnswerLeavesTheTaskWaiting(t *testing.T) {
	var sent atomic.Int64
	_, base := a2aNode(t, mailer(t, &sent))
	client, _ := a2aClient(t, base, "/a2a/mailer"+a2a.CardPath)
	ctx := context.Background()
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("mail bob")})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	if task.Status.State != sdk.TaskStateInputRequired {
		t.Fatalf("task %s: %s", task.ID, task.Status.State)
	}
	to := func(text string) *sdk.Message {
		m := userMessage(text)
		m.TaskID, m.ContextID = task.ID, task.ContextID
		return m
	}
	refused := func(how string, err error) {
		t.Helper()
		if !errors.Is(err, sdk.ErrInvalidParams) || !strings.Contains(err.Error(), "approve") {
			t.Fatalf("%s: %v, want invalid params saying the task waits for approval", how, err)
		}
		got, err := client.GetTask(ctx, &sdk.TaskQueryParams{ID: task.ID})
		if err != nil || got.Status.State != sdk.TaskStateInputRequired {
			t.Fatalf("after %s: %+v, %v; want the task still in input-required", how, got, err)
		}
	}
	_, err = client.SendMessage(ctx, &sdk.MessageSendParams{Message: to("what would it say?")})
	refused("message/send", err)
	// A reason the node refuses (over 4096 bytes) is no answer either.
	_, err = client.SendMessage(ctx, &sdk.MessageSendParams{Message: to("approve " + strings.Repeat("x", 5000))})
	if !errors.Is(err, sdk.ErrInvalidParams) || !strings.Contains(err.Error(), "4096") {
		t.Fatalf("an answer with a reason of 5,000 bytes: %v, want invalid params naming the bound", err)
	}
	if got, err := client.GetTask(ctx, &sdk.TaskQueryParams{ID: task.ID}); err != nil || got.Status.State != sdk.TaskStateInputRequired {
		t.Fatalf("after a reason of 5,000 bytes: %+v, %v; want the task still in input-required", got, err)
	}
	var streamErr error
	for _, err := range client.SendStreamingMessage(ctx, &sdk.MessageSendParams{Message: to("maybe later")}) {
		if err != nil {
			streamErr = err
			break
		}
	}
	refused("message/stream", streamErr)
	if sent.Load() != 0 {
		t.Fatal("the email was sent without approval")
	}
	res, err = client.SendMessage(ctx, &sdk.MessageSendParams{Message: to("approve")})
	if err != nil {
		t.Fatal(err)
	}
	if done := res.(*sdk.Task); done.Status.State != sdk.TaskStateCompleted || sent.Load() != 1 {
		t.Fatalf("after approval: %s, %d emails sent", done.Status.State, sent.Load())
	}
}

// A message to a task that runs (not waiting for input) is refused (-32602,
// saying so), and the task runs on to its end, which tasks/get then reports: on
// a node that resumed the task after a restart, the SDK had no execution of it,
// ran the message as an answer, and marked the task failed (with no reason),
// which tasks/get went on answering after the task completed.
func TestA2AMessageToARunningTaskLeavesItRunning(t *testing.T) {
	const answer = "the held call came back"
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	held := newHeldTool()
	cfg := heldConfig(t, held, answer)
	cfg.DataDir = dir
	cfg.HandoffGrace = heldCallGrace // the held call never answers on the first node
	url, stop := a2aNodeToStop(t, cfg)
	client, _ := a2aClient(t, url, a2a.CardPath)
	blocking := false
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("hold on"), Config: &sdk.MessageSendConfig{Blocking: &blocking}})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	held.waitStarted(t, "before the restart")
	more := func() *sdk.Message {
		m := userMessage("and one more thing")
		m.TaskID, m.ContextID = task.ID, task.ContextID
		return m
	}
	if _, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: more()}); !errors.Is(err, sdk.ErrInvalidParams) || !strings.Contains(err.Error(), "input-required") {
		t.Fatalf("a message to the running task: %v, want invalid params saying it takes none", err)
	}
	stop()

	again := newHeldTool()
	cfg = heldConfig(t, again, answer)
	cfg.DataDir = dir
	second := nodetest.Start(t, cfg)
	api := httptest.NewServer(second.Handler())
	defer api.Close()
	again.waitStarted(t, "again by the restarted node")
	client, _ = a2aClient(t, api.URL, a2a.CardPath)
	if res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: more()}); !errors.Is(err, sdk.ErrInvalidParams) || !strings.Contains(err.Error(), "input-required") {
		t.Fatalf("a message to the task the restarted node resumed: %+v, %v, want invalid params saying it takes none", res, err)
	}
	if got, err := client.GetTask(ctx, &sdk.TaskQueryParams{ID: task.ID}); err != nil || got.Status.State != sdk.TaskStateWorking {
		t.Fatalf("tasks/get after the message: %+v, %v; want the task working", got, err)
	}
	close(again.release)
	for {
		got, err := client.GetTask(ctx, &sdk.TaskQueryParams{ID: task.ID})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.State.Terminal() {
			if got.Status.State != sdk.TaskStateCompleted || artifactText(t, got) != answer {
				t.Fatalf("the task ended %s with %q, want completed with its answer", got.Status.State, artifactText(t, got))
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the task is still %s", got.Status.State)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// An approval whose reason follows on the next line, as a chat client sends
// what its user typed ("Approve.\nThe recipient is right."), approves the call:
// it was no answer (-32602) and the call waited on.
func TestA2AAnswerWithItsReasonOnTheNextLineApproves(t *testing.T) {
	var sent atomic.Int64
	_, base := a2aNode(t, mailer(t, &sent))
	client, _ := a2aClient(t, base, "/a2a/mailer"+a2a.CardPath)
	ctx := context.Background()
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("mail bob")})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	if task.Status.State != sdk.TaskStateInputRequired {
		t.Fatalf("task %s: %s", task.ID, task.Status.State)
	}
	m := userMessage("Approve.\nThe recipient is right.\n")
	m.TaskID, m.ContextID = task.ID, task.ContextID
	res, err = client.SendMessage(ctx, &sdk.MessageSendParams{Message: m})
	if err != nil {
		t.Fatal(err)
	}
	if done := res.(*sdk.Task); done.Status.State != sdk.TaskStateCompleted || sent.Load() != 1 {
		t.Fatalf("after approval: %s, %d emails sent", done.Status.State, sent.Load())
	}
}
