package node_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// legacyEnvelopeID is the task.submitted envelope ID the builds before
// a2a.EnvelopeID took the context gave the task of message messageID: derived
// from the messageId alone.
func legacyEnvelopeID(messageID string) string {
	sum := sha256.Sum256([]byte(messageID))
	return "a2a-" + hex.EncodeToString(sum[:16])
}

// recordLegacyTask writes to the log, as an older build did, the task message
// messageID started in session and its end, answered output.
func recordLegacyTask(t *testing.T, n *node.Node, session, messageID, output string) sdk.TaskID {
	t.Helper()
	env := legacyEnvelopeID(messageID)
	var events []messages.Envelope
	for i, p := range []messages.Payload{&messages.TaskSubmitted{Input: "hi"}, &messages.TaskCompleted{Output: output, Steps: 1}} {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.SessionID, e.Seq, e.TS, e.CorrelationID = session, uint64(i+1), time.Now().UnixMicro()+int64(i), env
		e.ID = env
		if i == 0 {
			e.CausationID = a2a.MessageCause(messageID)
		} else {
			e.ID = env + "-end"
		}
		events = append(events, e)
	}
	if err := n.Log().Append(context.Background(), events); err != nil {
		t.Fatal(err)
	}
	return sdk.TaskID(session + "~" + strings.TrimPrefix(env, "a2a-"))
}

// TestA2AMessageSentAgainAfterAnUpgradeIsTheTaskRecordedBefore: a task an older
// build recorded has its envelope ID derived from the messageId alone. Its client,
// retrying the message/send whose answer it lost (the node restarted on the new
// build meanwhile), sends the same messageId in the same context: that is the
// task recorded, not a new one, whether the message named its context or not
// (ContextFor). It started the task a second time: the agent ran again, a
// duplicate of whatever its tools did. The same messageId in another context is
// another task still.
func TestA2AMessageSentAgainAfterAnUpgradeIsTheTaskRecordedBefore(t *testing.T) {
	n, base := a2aNode(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: "ran again"}, llm.ScriptStep{Content: "another context"})})
	client, _ := a2aClient(t, base, a2a.CardPath)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	named := recordLegacyTask(t, n, "ctx-old", "1", "done before")
	unnamed := recordLegacyTask(t, n, a2a.ContextFor("m-7"), "m-7", "done before too")

	for _, c := range []struct {
		id, context string
		want        sdk.TaskID
		output      string
	}{{"1", "ctx-old", named, "done before"}, {"m-7", "", unnamed, "done before too"}} {
		msg := userMessage("hi")
		msg.ID, msg.ContextID = c.id, c.context
		got, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: msg})
		if err != nil {
			t.Fatalf("message %s: %v", c.id, err)
		}
		task, ok := got.(*sdk.Task)
		if !ok || task.ID != c.want || task.Status.State != sdk.TaskStateCompleted || artifactText(t, task) != c.output {
			t.Fatalf("message %s sent again answered %+v (%q); want the task recorded, %s, with %q", c.id, got, artifactText(t, task), c.want, c.output)
		}
		stream := userMessage("hi")
		stream.ID, stream.ContextID = c.id, c.context
		for ev, err := range client.SendStreamingMessage(ctx, &sdk.MessageSendParams{Message: stream}) {
			if err != nil {
				t.Fatalf("message %s streamed: %v", c.id, err)
			}
			if ev.TaskInfo().TaskID != c.want {
				t.Fatalf("message %s streamed again: an event of task %s, want %s", c.id, ev.TaskInfo().TaskID, c.want)
			}
		}
		events, err := n.Log().Read(ctx, string(c.want[:strings.LastIndex(string(c.want), "~")]), 1)
		if err != nil {
			t.Fatal(err)
		}
		submitted := 0
		for _, e := range events {
			if e.Type == messages.TypeTaskSubmitted {
				submitted++
			}
		}
		if submitted != 1 {
			t.Fatalf("message %s: the session recorded %d tasks, want the one recorded before", c.id, submitted)
		}
	}

	// Its task ID names the legacy envelope: tasks/get, tasks/resubscribe and its
	// push configs find it from the session's events.
	if got, err := client.GetTask(ctx, &sdk.TaskQueryParams{ID: named}); err != nil || got.Status.State != sdk.TaskStateCompleted || artifactText(t, got) != "done before" {
		t.Fatalf("tasks/get %s: %+v, %v", named, got, err)
	}
	for ev, err := range client.ResubscribeToTask(ctx, &sdk.TaskIDParams{ID: named}) {
		if err != nil || ev.TaskInfo().TaskID != named {
			t.Fatalf("tasks/resubscribe %s: %v, %v", named, ev, err)
		}
	}
	if _, err := client.ListTaskPushConfig(ctx, &sdk.ListTaskPushConfigParams{TaskID: named}); err != nil {
		t.Fatalf("push configs of %s: %v", named, err)
	}

	// The same messageId in another context is that context's own task.
	other := userMessage("hi")
	other.ID, other.ContextID = "1", "ctx-new"
	got, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: other})
	if err != nil {
		t.Fatal(err)
	}
	if task, ok := got.(*sdk.Task); !ok || task.ID != a2a.TaskIDFor("ctx-new", "1") || artifactText(t, task) != "ran again" {
		t.Fatalf("messageId 1 in another context answered %+v; want a task of its own", got)
	}
}
