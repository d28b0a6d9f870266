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
