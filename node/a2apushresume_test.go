package node_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A task with a push config that the node's restart cut is resumed by the
// restarted node, and its webhook hears of it to its end, with no client
// connected: push notifications are for the client that is not (they were posted
// by the A2A execution of the process the message came to, which the restart
// ended: the task completed after it, and the webhook never heard so).
func TestA2APushFollowsATaskResumedAfterARestart(t *testing.T) {
	const answer = "resumed and pushed"
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hook, hookURL := newPushHook(t)

	held := newHeldTool()
	cfg := heldConfig(t, held, answer)
	cfg.DataDir = dir
	cfg.A2A = &node.A2AConfig{PushAllow: []string{"127.0.0.1"}}
	url, stop := a2aNodeToStop(t, cfg)
	client, _ := a2aClient(t, url, a2a.CardPath)
	blocking := false
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("hold on"),
		Config: &sdk.MessageSendConfig{Blocking: &blocking, PushConfig: &sdk.PushConfig{ID: "hook", URL: hookURL + "/resumed"}}})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	held.waitStarted(t, "before the restart")
	stop()
	before, _ := hook.got("/resumed")

	again := newHeldTool()
	cfg2 := heldConfig(t, again, answer)
	cfg2.DataDir, cfg2.A2A = dir, cfg.A2A
	second := nodetest.Start(t, cfg2)
	api := httptest.NewServer(second.Handler())
	defer api.Close()
	again.waitStarted(t, "again by the restarted node")
	close(again.release)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		states, _ := hook.got("/resumed")
		if len(states) > 0 && states[len(states)-1] == sdk.TaskStateCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook did not hear of the resumed task's end within 30 s: before the restart it got %v, in all %v", before, states)
		}
	}
	if _, output := recordedAnswer(t, second, task.ContextID); output != answer {
		t.Fatalf("the recorded answer: %q", output)
	}
	oneTaskEnded(t, second, task.ContextID, messages.TypeTaskCompleted)
}
