package node_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// An A2A "approve" to a task whose call was approved over the task API (POST
// /v1/sessions/{id}/approvals/{call}) while the node held the task as waiting
// for it is refused, naming the call the task asks for next, which it does not
// approve: the client was shown the first call, not that one. Answered after
// that, it is approved.
func TestA2AAnswerAfterAnApprovalOverTheAPIApprovesNoOtherCall(t *testing.T) {
	var sent atomic.Int64
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "call_bob", Name: "send_email", Arguments: `{"to":"bob@example.com"}`}}},
		{ToolCalls: []messages.ToolCall{{ID: "call_eve", Name: "send_email", Arguments: `{"to":"eve@example.com"}`}}},
		{Content: "mailed"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	n, base := a2aNode(t, node.Config{Model: model, Tools: []tools.Tool{emailTool{&sent}},
		Agents: []node.NamedAgent{{Name: "mailer", Tools: []string{"send_email"}, Approvals: []string{"send_email"}}}})
	client, _ := a2aClient(t, base, "/a2a/mailer"+a2a.CardPath)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("mail bob, then eve")})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	if task.Status.State != sdk.TaskStateInputRequired || !strings.Contains(task.Status.Message.Parts[0].(sdk.TextPart).Text, "call_bob") {
		t.Fatalf("task %s: %s, want input-required naming call_bob", task.ID, task.Status.State)
	}
	if err := n.Approve(ctx, task.ContextID, "call_bob", true, "", messages.ApprovedByAPI); err != nil {
		t.Fatal(err)
	}
	if p := waitApproval(t, n, task.ContextID); p.Call != "call_eve" {
		t.Fatalf("the session waits for %s, want call_eve", p.Call)
	}
	to := func(text string) *sdk.Message {
		m := userMessage(text)
		m.TaskID, m.ContextID = task.ID, task.ContextID
		return m
	}
	_, err = client.SendMessage(ctx, &sdk.MessageSendParams{Message: to("approve")})
	if !errors.Is(err, sdk.ErrInvalidParams) || !strings.Contains(err.Error(), "call_eve") {
		t.Fatalf("an answer to call_bob, approved already: %v; want invalid params naming call_eve", err)
	}
	if sent.Load() != 1 {
		t.Fatalf("%d emails sent, want bob's alone", sent.Load())
	}
	got, err := client.GetTask(ctx, &sdk.TaskQueryParams{ID: task.ID})
	if err != nil || got.Status.State != sdk.TaskStateInputRequired || !strings.Contains(got.Status.Message.Parts[0].(sdk.TextPart).Text, "call_eve") {
		t.Fatalf("tasks/get: %+v, %v; want input-required naming call_eve", got, err)
	}
	res, err = client.SendMessage(ctx, &sdk.MessageSendParams{Message: to("approve")})
	if err != nil {
		t.Fatal(err)
	}
	if done := res.(*sdk.Task); done.Status.State != sdk.TaskStateCompleted || sent.Load() != 2 {
		t.Fatalf("after approving call_eve: %s, %d emails sent", done.Status.State, sent.Load())
	}
}
