package node_test

import (
	"context"
	"testing"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
)

// TestA2ASameMessageIDInTwoContextsStartsTwoTasks: a messageId is the client's,
// unique to it, not to the node: two clients (or one client's two conversations)
// that number their messages "1", "2", … send the same messageId in two contexts.
// Each starts its own task in its own session. The task.submitted's envelope ID
// was derived from the messageId alone, and envelope IDs are the log's, across
// sessions: the second context's task was refused by the log ("seq already taken
// by a different event: event a2a-… is stored at session ctx-a") and its session
// failed.
func TestA2ASameMessageIDInTwoContextsStartsTwoTasks(t *testing.T) {
	_, base := a2aNode(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: "first"}, llm.ScriptStep{Content: "second"})})
	client, _ := a2aClient(t, base, a2a.CardPath)
	var ids []sdk.TaskID
	for _, ctx := range []string{"ctx-a", "ctx-b"} {
		msg := userMessage("hi")
		msg.ID, msg.ContextID = "1", ctx
		got, err := client.SendMessage(context.Background(), &sdk.MessageSendParams{Message: msg})
		if err != nil {
			t.Fatalf("context %s: %v", ctx, err)
		}
		task, ok := got.(*sdk.Task)
		if !ok || task.Status.State != sdk.TaskStateCompleted || task.ContextID != ctx {
			t.Fatalf("context %s: %+v; want a task completed in its context", ctx, got)
		}
		ids = append(ids, task.ID)
	}
	if ids[0] == ids[1] {
		t.Fatalf("both contexts' tasks are %s", ids[0])
	}
}
