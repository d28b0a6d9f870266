package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
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

// A JSON-RPC notification (a request without "id") is no A2A request: every A2A
// method is a request answered under its id. It is refused as an invalid request
// (-32600, with a null id, as JSON-RPC answers a request whose id it cannot tell)
// and runs nothing: a message/send (1.0: SendMessage) notification starts no
// task, however often it is sent. Before, it ran, and was answered with a null
// id: a client that sent it again, having no answer it could match, started the
// task again under another messageId, or its sender never knew of the task.
func TestA2ANotificationIsRefusedAndRunsNothing(t *testing.T) {
	n, base := a2aNode(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: "done"})})
	bodies := map[string]string{
		"message/send":   `{"jsonrpc":"2.0","method":"message/send","params":{"message":{"kind":"message","messageId":"note-1","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`,
		"SendMessage":    `{"jsonrpc":"2.0","method":"SendMessage","params":{"message":{"messageId":"note-2","role":"ROLE_USER","parts":[{"text":"hi"}]}}}`,
		"message/stream": `{"jsonrpc":"2.0","method":"message/stream","params":{"message":{"kind":"message","messageId":"note-3","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`,
	}
	sessions := map[string]string{"message/send": "note-1", "SendMessage": "note-2", "message/stream": "note-3"}
	for method, body := range bodies {
		for range 2 { // sent again, as a client without an answer would
			resp, err := http.Post(base+"/a2a", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(raw), `"code":-32600`) || !strings.Contains(string(raw), `"id":null`) {
				t.Fatalf("%s notification: %s %q, want -32600 with a null id", method, resp.Status, raw)
			}
		}
		session := a2a.ContextFor(sessions[method])
		if events, err := n.Log().Read(context.Background(), session, 1); err != nil || len(events) != 0 {
			t.Fatalf("%s notification: session %s has %d events (%v), want none: it ran", method, session, len(events), err)
		}
	}
	// A request of the same message, with an id, runs it once.
	if code := rpcErrorCode(t, base+"/a2a", "message/send", map[string]any{"message": map[string]any{"kind": "message",
		"messageId": "note-1", "role": "user", "parts": []any{map[string]any{"kind": "text", "text": "hi"}}}}); code != 0 {
		t.Fatalf("message/send with an id: error %d", code)
	}
	oneTaskEnded(t, n, a2a.ContextFor("note-1"), messages.TypeTaskCompleted)
}

// With several agents, a task is its agent's: through another agent's endpoint
// (/a2a for the default agent, /a2a/{agent} for a named one) tasks/get,
// tasks/cancel, tasks/resubscribe and a message naming the task answer
// TaskNotFoundError (-32001), as if it were not there, and change nothing; its own
// endpoint serves it. Before, any endpoint served any agent's task: a client that
// mixed its endpoints up read, cancelled or answered another agent's task
// without knowing.
func TestA2ATaskIsNotFoundThroughAnotherAgentsEndpoint(t *testing.T) {
	block := newBlockingTool()
	_, base := a2aNode(t, node.Config{Model: blockScript(t), Tools: []tools.Tool{block},
		Agents: []node.NamedAgent{{Name: "helper", Tools: []string{"block"}}}})
	helper, _ := a2aClient(t, base, "/a2a/helper"+a2a.CardPath)
	def, _ := a2aClient(t, base, a2a.CardPath)
	blocking := false
	res, err := helper.SendMessage(context.Background(), &sdk.MessageSendParams{Message: userMessage("block"),
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
	if got, err := def.GetTask(context.Background(), &sdk.TaskQueryParams{ID: task.ID}); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Fatalf("tasks/get of the helper's task at /a2a: %+v, %v, want TaskNotFound", got, err)
	}
	if got, err := def.CancelTask(context.Background(), &sdk.TaskIDParams{ID: task.ID}); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Fatalf("tasks/cancel of the helper's task at /a2a: %+v, %v, want TaskNotFound", got, err)
	}
	for ev, err := range def.ResubscribeToTask(context.Background(), &sdk.TaskIDParams{ID: task.ID}) {
		if !errors.Is(err, sdk.ErrTaskNotFound) {
			t.Fatalf("tasks/resubscribe to the helper's task at /a2a: %#v, %v, want TaskNotFound", ev, err)
		}
		break
	}
	answer := userMessage("approve")
	answer.TaskID, answer.ContextID = task.ID, task.ContextID
	if got, err := def.SendMessage(context.Background(), &sdk.MessageSendParams{Message: answer}); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Fatalf("message/send to the helper's task at /a2a: %+v, %v, want TaskNotFound", got, err)
	}
	cfg, err := helper.SetTaskPushConfig(context.Background(), &sdk.TaskPushConfig{TaskID: task.ID,
		Config: sdk.PushConfig{ID: "hook-1", URL: "https://hooks.example.com/a2a"}})
	if err != nil {
		t.Fatalf("a push config of the helper's task at /a2a/helper: %v", err)
	}
	if got, err := def.GetTaskPushConfig(context.Background(), &sdk.GetTaskPushConfigParams{TaskID: task.ID, ConfigID: cfg.Config.ID}); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Fatalf("the push config of the helper's task at /a2a: %+v, %v, want TaskNotFound", got, err)
	}
	if got, err := def.ListTaskPushConfig(context.Background(), &sdk.ListTaskPushConfigParams{TaskID: task.ID}); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Fatalf("the push configs of the helper's task at /a2a: %+v, %v, want TaskNotFound", got, err)
	}
	if err := def.DeleteTaskPushConfig(context.Background(), &sdk.DeleteTaskPushConfigParams{TaskID: task.ID, ConfigID: cfg.Config.ID}); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Fatalf("deleting the push config of the helper's task at /a2a: %v, want TaskNotFound", err)
	}
	if got, err := helper.ListTaskPushConfig(context.Background(), &sdk.ListTaskPushConfigParams{TaskID: task.ID}); err != nil || len(got) != 1 {
		t.Fatalf("the push configs of the helper's task at /a2a/helper: %+v, %v, want its one", got, err)
	}
	for _, method := range []string{"GetTask", "CancelTask"} {
		if code := rpcErrorCode(t, base+"/a2a", method, map[string]any{"id": string(task.ID)}); code != -32001 {
			t.Fatalf("%s of the helper's task at /a2a: error %d, want -32001", method, code)
		}
	}
	// The task ran on, untouched; its own endpoint reads and cancels it.
	if got, err := helper.GetTask(context.Background(), &sdk.TaskQueryParams{ID: task.ID}); err != nil || got.Status.State != sdk.TaskStateWorking {
		t.Fatalf("tasks/get of the helper's task at /a2a/helper: %+v, %v, want it working", got, err)
	}
	if got, err := helper.CancelTask(context.Background(), &sdk.TaskIDParams{ID: task.ID}); err != nil || got.Status.State != sdk.TaskStateCanceled {
		t.Fatalf("tasks/cancel of the helper's task at /a2a/helper: %+v, %v", got, err)
	}
	waitCancelled(t, block, 20*time.Second)

	// The default agent's task is not the helper's either.
	res, err = def.SendMessage(context.Background(), &sdk.MessageSendParams{Message: userMessage("block"),
		Config: &sdk.MessageSendConfig{Blocking: &blocking}})
	if err != nil {
		t.Fatal(err)
	}
	mine := res.(*sdk.Task)
	if got, err := helper.GetTask(context.Background(), &sdk.TaskQueryParams{ID: mine.ID}); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Fatalf("tasks/get of the default agent's task at /a2a/helper: %+v, %v, want TaskNotFound", got, err)
	}
	if got, err := helper.CancelTask(context.Background(), &sdk.TaskIDParams{ID: mine.ID}); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Fatalf("tasks/cancel of the default agent's task at /a2a/helper: %+v, %v, want TaskNotFound", got, err)
	}
	if got, err := def.CancelTask(context.Background(), &sdk.TaskIDParams{ID: mine.ID}); err != nil || got.Status.State != sdk.TaskStateCanceled {
		t.Fatalf("tasks/cancel of the default agent's task at /a2a: %+v, %v", got, err)
	}
}
