package node_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
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
