package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// tasks/cancel of a task that ended, completed or cancelled, is refused with
// TaskNotCancelableError (-32002), as the A2A specification says of a task in a
// terminal state and the Python SDK's server answers. Before, a completed task was
// answered with the task, completed, as if the cancel had been taken.
func TestA2ACancelOfAnEndedTaskIsRefused(t *testing.T) {
	_, base := a2aNode(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: "done"})})
	client, _ := a2aClient(t, base, a2a.CardPath)
	res, err := client.SendMessage(context.Background(), &sdk.MessageSendParams{Message: userMessage("hi")})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	if task.Status.State != sdk.TaskStateCompleted {
		t.Fatalf("task %s: %s, want completed", task.ID, task.Status.State)
	}
	got, err := client.CancelTask(context.Background(), &sdk.TaskIDParams{ID: task.ID})
	if !errors.Is(err, sdk.ErrTaskNotCancelable) {
		t.Fatalf("tasks/cancel of a completed task: %+v, %v, want TaskNotCancelable", got, err)
	}
	after, err := client.GetTask(context.Background(), &sdk.TaskQueryParams{ID: task.ID})
	if err != nil || after.Status.State != sdk.TaskStateCompleted {
		t.Fatalf("tasks/get after the refused cancel: %+v, %v", after, err)
	}
	// A2A 1.0's CancelTask refuses it too.
	if code := rpcErrorCode(t, base+"/a2a", "CancelTask", map[string]any{"id": string(task.ID)}); code != -32002 {
		t.Fatalf("CancelTask of a completed task: error %d, want -32002", code)
	}
}

// tasks/cancel of a task cancelled before is refused (-32002), as every task that
// ended is, by the specification's text and the Python SDK's server; the task stays
// canceled. Before, it was answered with the task, canceled, as the first
// cancellation was.
func TestA2ACancelOfACancelledTaskIsRefused(t *testing.T) {
	block := newBlockingTool()
	_, base := a2aNode(t, node.Config{Model: blockScript(t), Tools: []tools.Tool{block}})
	client, _ := a2aClient(t, base, a2a.CardPath)
	blocking := false
	res, err := client.SendMessage(context.Background(), &sdk.MessageSendParams{Message: userMessage("block"),
		Config: &sdk.MessageSendConfig{Blocking: &blocking}})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	select {
	case <-block.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the tool never started")
	}
	canceled, err := client.CancelTask(context.Background(), &sdk.TaskIDParams{ID: task.ID})
	if err != nil || canceled.Status.State != sdk.TaskStateCanceled {
		t.Fatalf("tasks/cancel of the running task: %+v, %v", canceled, err)
	}
	waitCancelled(t, block, 20*time.Second)
	again, err := client.CancelTask(context.Background(), &sdk.TaskIDParams{ID: task.ID})
	if !errors.Is(err, sdk.ErrTaskNotCancelable) {
		t.Fatalf("tasks/cancel of a cancelled task: %+v, %v, want TaskNotCancelable", again, err)
	}
	if code := rpcErrorCode(t, base+"/a2a", "CancelTask", map[string]any{"id": string(task.ID)}); code != -32002 {
		t.Fatalf("CancelTask of a cancelled task: error %d, want -32002", code)
	}
	got, err := client.GetTask(context.Background(), &sdk.TaskQueryParams{ID: task.ID})
	if err != nil || got.Status.State != sdk.TaskStateCanceled {
		t.Fatalf("tasks/get after the refused cancel: %+v, %v", got, err)
	}
	// A task that failed (its deadline passed while its tool ran) is refused too.
	m := userMessage("block")
	m.Metadata = map[string]any{"deadline_ms": 50}
	res, err = client.SendMessage(context.Background(), &sdk.MessageSendParams{Message: m})
	if err != nil {
		t.Fatal(err)
	}
	failed := res.(*sdk.Task)
	waitFor(t, 20*time.Second, "the task failed", func() bool {
		got, err := client.GetTask(context.Background(), &sdk.TaskQueryParams{ID: failed.ID})
		return err == nil && got.Status.State == sdk.TaskStateFailed
	})
	if got, err := client.CancelTask(context.Background(), &sdk.TaskIDParams{ID: failed.ID}); !errors.Is(err, sdk.ErrTaskNotCancelable) {
		t.Fatalf("tasks/cancel of a failed task: %+v, %v, want TaskNotCancelable", got, err)
	}
}

// rpcErrorCode posts a JSON-RPC request to url and returns its error's code, 0
// when it answered a result.
func rpcErrorCode(t *testing.T, url, method string, params any) int {
	t.Helper()
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	if out.Error == nil {
		return 0
	}
	return out.Error.Code
}
