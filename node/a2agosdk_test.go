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

// A message the node refuses before the SDK's handler sees it (a file part
// whose bytes are not base64) is an error that says why on the official Go
// client, with its defaults, sent or streamed: the client shows the reason of an
// error only from its data ({"error": "..."}, as the SDK writes its own), and
// reads the answer to a message/stream as SSE only. A refusal in plain JSON with
// the reason in its message alone was "invalid params" when sent, and an empty
// stream, without an event or an error, when streamed.
func TestA2AGoClientHearsWhyItsMessageIsRefused(t *testing.T) {
	_, base := a2aNode(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: "after"})})
	client, _ := a2aClient(t, base, a2a.CardPath)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bad := sdk.NewMessage(sdk.MessageRoleUser, sdk.TextPart{Text: "hi"},
		sdk.FilePart{File: sdk.FileBytes{FileMeta: sdk.FileMeta{MimeType: "text/plain"}, Bytes: "not base64!"}})
	const why = "message.parts[1].file.bytes"
	_, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: bad})
	if !errors.Is(err, sdk.ErrInvalidParams) || !strings.Contains(fmtErr(err), why) {
		t.Errorf("message/send: %v, want invalid params naming %s", err, why)
	}
	var events []sdk.Event
	var errs []error
	for ev, err := range client.SendStreamingMessage(ctx, &sdk.MessageSendParams{Message: bad}) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		events = append(events, ev)
	}
	if len(events) != 0 || len(errs) != 1 || !errors.Is(errs[0], sdk.ErrInvalidParams) || !strings.Contains(fmtErr(errs[0]), why) {
		t.Errorf("message/stream: events %v, errors %v; want one error, invalid params naming %s", events, errs, why)
	}
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("hi")})
	if task, ok := res.(*sdk.Task); err != nil || !ok || task.Status.State != sdk.TaskStateCompleted || artifactText(t, task) != "after" {
		t.Fatalf("message/send after the refusals: %v %v", res, err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// nestedData is an object nested depth deep.
func nestedData(depth int) map[string]any {
	m := map[string]any{"leaf": true}
	for range depth {
		m = map[string]any{"k": m}
	}
	return m
}

// The official Go client, with its defaults: a client that drops its
// message/stream while the task runs leaves the task running to its end, once
// (tasks/get and tasks/resubscribe then see it completed, with its answer); a
// message over the node's bound is refused with its HTTP status, and one with a
// data part nested 5000 deep runs; the node goes on serving.
func TestA2AGoClientDropsItsStreamMidTask(t *testing.T) {
	m := &gateModel{release: make(chan struct{})}
	_, base := a2aNode(t, node.Config{Model: m})
	client, _ := a2aClient(t, base, a2a.CardPath)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	sctx, scancel := context.WithCancel(ctx)
	var id sdk.TaskID
	for ev, err := range client.SendStreamingMessage(sctx, &sdk.MessageSendParams{Message: userMessage("hold")}) {
		if err != nil {
			t.Fatalf("message/stream before the drop: %v", err)
		}
		if task, ok := ev.(*sdk.Task); ok {
			id = task.ID
		}
		if st, ok := ev.(*sdk.TaskStatusUpdateEvent); ok && st.Status.State == sdk.TaskStateWorking {
			break // the client drops the stream
		}
	}
	scancel()
	if id == "" {
		t.Fatal("the stream named no task")
	}
	close(m.release)
	var got *sdk.Task
	waitFor(t, 20*time.Second, "the dropped stream's task ended", func() bool {
		var err error
		got, err = client.GetTask(ctx, &sdk.TaskQueryParams{ID: id})
		return err == nil && got.Status.State.Terminal()
	})
	if got.Status.State != sdk.TaskStateCompleted || artifactText(t, got) != "ok hold" || m.calls("hold") != 1 {
		t.Fatalf("the dropped stream's task: %s %q, model asked %d times; want it completed once", got.Status.State, artifactText(t, got), m.calls("hold"))
	}
	var last sdk.Event
	for ev, err := range client.ResubscribeToTask(ctx, &sdk.TaskIDParams{ID: id}) {
		if err != nil {
			t.Fatalf("tasks/resubscribe: %v", err)
		}
		last = ev
	}
	if task, ok := last.(*sdk.Task); !ok || task.Status.State != sdk.TaskStateCompleted {
		t.Errorf("tasks/resubscribe of the ended task: %#v, want the task completed", last)
	}

	_, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage(strings.Repeat("x", 3<<20))})
	if err == nil || !strings.Contains(err.Error(), "413") {
		t.Errorf("a 3 MiB message: %v, want HTTP 413", err)
	}
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: sdk.NewMessage(sdk.MessageRoleUser, sdk.TextPart{Text: "deep"}, sdk.DataPart{Data: nestedData(5000)})})
	if task, ok := res.(*sdk.Task); err != nil || !ok || task.Status.State != sdk.TaskStateCompleted || !strings.HasPrefix(artifactText(t, task), "ok deep\n{\"k\":{\"k\":") {
		t.Fatalf("a data part nested 5000 deep: %v %v", res, err)
	}
}

// A request nested deeper than 10,000 levels (a data part nested 9,996 deep, as
// deep as the official Go client encodes, in a message in the request's params),
// is deeper than the node decodes: the client hears invalid params saying
// so, answered to its request's id, where a parse error of id null told it
// nothing it could match to its request; nothing runs, and the node goes on
// serving.
func TestA2AGoClientHearsItsMessageIsTooDeep(t *testing.T) {
	_, base := a2aNode(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: "after"})})
	client, _ := a2aClient(t, base, a2a.CardPath)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deep := sdk.NewMessage(sdk.MessageRoleUser, sdk.TextPart{Text: "deep"}, sdk.DataPart{Data: nestedData(9995)})
	const why = "more than the 10000 this server reads"
	_, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: deep})
	if !errors.Is(err, sdk.ErrInvalidParams) || !strings.Contains(fmtErr(err), why) {
		t.Errorf("message/send: %v, want invalid params saying %q", err, why)
	}
	var errs []error
	for _, err := range client.SendStreamingMessage(ctx, &sdk.MessageSendParams{Message: deep}) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) != 1 || !errors.Is(errs[0], sdk.ErrInvalidParams) || !strings.Contains(fmtErr(errs[0]), why) {
		t.Errorf("message/stream: errors %v; want one, invalid params saying %q", errs, why)
	}
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("hi")})
	if task, ok := res.(*sdk.Task); err != nil || !ok || task.Status.State != sdk.TaskStateCompleted || artifactText(t, task) != "after" {
		t.Fatalf("message/send after the refusals: %v %v", res, err)
	}
}
