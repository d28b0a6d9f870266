package node_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A task read after a restart (from its session's events) shows the client's
// messageId as its first message's, as the node that ran it did.
func TestA2ATaskKeepsTheClientsMessageIDAfterARestart(t *testing.T) {
	cfg := node.Config{A2A: &node.A2AConfig{}, DataDir: t.TempDir(), Model: a2aScript(t, llm.ScriptStep{Content: "done"})}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url, stop := a2aNodeToStop(t, cfg)
	client, _ := a2aClient(t, url, a2a.CardPath)
	msg := userMessage("hello")
	msg.ID = "client-message-7"
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	if task.Status.State != sdk.TaskStateCompleted || len(task.History) == 0 || task.History[0].ID != msg.ID {
		t.Fatalf("before the restart: %s, history %+v", task.Status.State, task.History)
	}
	stop()

	second := nodetest.Start(t, cfg)
	api := httptest.NewServer(second.Handler())
	t.Cleanup(api.Close)
	client, _ = a2aClient(t, api.URL, a2a.CardPath)
	got, err := client.GetTask(ctx, &sdk.TaskQueryParams{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.History) == 0 || got.History[0].ID != msg.ID {
		var ids []string
		for _, m := range got.History {
			ids = append(ids, m.ID)
		}
		t.Fatalf("after the restart, the task's messages are %q, want the first %q", ids, msg.ID)
	}
}
