package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
)

// tasks/pushNotificationConfig/get of a config the task does not have is
// TaskNotFoundError (-32001) naming the config, as the A2A SDKs' servers (Python
// 1.x, JavaScript) answer it, for a task with configs or without; of a task the
// node does not know, TaskNotFoundError too. (It was -32603 "internal error",
// with no word of what was missing: a client took it for the server's fault.)
func TestA2APushConfigGetOfAnUnknownConfigIsNotFound(t *testing.T) {
	_, base := a2aNode(t, node.Config{Model: &heldEcho{held: make(chan struct{}), release: make(chan struct{})}})
	client, _ := a2aClient(t, base, a2a.CardPath)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("hello")})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	get := func(what string) {
		t.Helper()
		got, err := client.GetTaskPushConfig(ctx, &sdk.GetTaskPushConfigParams{TaskID: task.ID, ConfigID: "nope"})
		if !errors.Is(err, sdk.ErrTaskNotFound) || !strings.Contains(err.Error(), "nope") {
			t.Fatalf("get of an unknown config (%s): %+v, %v, want TaskNotFoundError naming it", what, got, err)
		}
	}
	get("a task without configs")
	if _, err := client.SetTaskPushConfig(ctx, &sdk.TaskPushConfig{TaskID: task.ID, Config: sdk.PushConfig{ID: "one", URL: "https://hooks.example.com/a"}}); err != nil {
		t.Fatal(err)
	}
	get("a task with another config")
	if _, err := client.GetTaskPushConfig(ctx, &sdk.GetTaskPushConfigParams{TaskID: sdk.TaskID(task.ContextID + "~0123456789abcdef0123456789abcdef"), ConfigID: "one"}); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Fatalf("get of a config of an unknown task: %v, want TaskNotFoundError", err)
	}
}

// tasks/pushNotificationConfig/list and delete of a task the node does not know
// are TaskNotFoundError (-32001), as the specification lists them and the Python
// SDK's servers (0.3 and 1.x) answer, not an empty list and a success: a client
// that got a task's ID wrong hears so. Of a task it knows, list answers its
// configs (none: an empty list) and delete of a config it does not have succeeds.
func TestA2APushConfigListAndDeleteOfAnUnknownTaskAreNotFound(t *testing.T) {
	_, base := a2aNode(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: "done"})})
	client, _ := a2aClient(t, base, a2a.CardPath)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("hello")})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	for _, id := range []sdk.TaskID{"nope", sdk.TaskID(task.ContextID + "~0123456789abcdef0123456789abcdef")} {
		if got, err := client.ListTaskPushConfig(ctx, &sdk.ListTaskPushConfigParams{TaskID: id}); !errors.Is(err, sdk.ErrTaskNotFound) {
			t.Errorf("list of the configs of unknown task %s: %+v, %v, want TaskNotFoundError", id, got, err)
		}
		if err := client.DeleteTaskPushConfig(ctx, &sdk.DeleteTaskPushConfigParams{TaskID: id, ConfigID: "one"}); !errors.Is(err, sdk.ErrTaskNotFound) {
			t.Errorf("delete of a config of unknown task %s: %v, want TaskNotFoundError", id, err)
		}
	}
	if got, err := client.ListTaskPushConfig(ctx, &sdk.ListTaskPushConfigParams{TaskID: task.ID}); err != nil || len(got) != 0 {
		t.Errorf("list of a known task without configs: %+v, %v", got, err)
	}
	if err := client.DeleteTaskPushConfig(ctx, &sdk.DeleteTaskPushConfigParams{TaskID: task.ID, ConfigID: "one"}); err != nil {
		t.Errorf("delete of a config a known task does not have: %v", err)
	}
}
