package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// A cancellation a sharded node sends to the session's owner over troupe.tasks has
// the secrets of its reason redacted before it is published, as a task's input has.
func TestPublishedCancelReasonIsRedacted(t *testing.T) {
	const secret = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	log := sharedLog(t)
	env, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "echo x"})
	if err != nil {
		t.Fatal(err)
	}
	env.ID, env.SessionID, env.Seq, env.TS, env.Actor = "task-1", "running-session", 1, 1, "session"
	if err := log.Append(ctx, []messages.Envelope{env}); err != nil {
		t.Fatal(err)
	}
	bus := node.NewEmbeddedBus(watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	tasks, err := bus.Subscribe(ctx, messages.TopicTasks)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(ctx, node.Config{DataDir: t.TempDir(), Log: log, Roles: node.RoleClient,
		Bus: &node.Bus{Publisher: bus, Tasks: bus, Live: bus, Sharded: true, Partition: func(string, int) int { return 0 }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	errc := make(chan error, 1)
	go func() { errc <- n.Cancel(ctx, "running-session", "stop: the key "+secret+" leaked") }()
	select {
	case msg := <-tasks:
		msg.Ack()
		if strings.Contains(string(msg.Payload), secret) {
			t.Errorf("the published cancellation holds the secret: %s", msg.Payload)
		}
		c, err := messages.DecodeCancelRequest(msg.Payload)
		if err != nil || c.SessionID != "running-session" || !strings.Contains(c.Reason, "stop: the key") {
			t.Errorf("published %+v, %v", c, err)
		}
	case <-ctx.Done():
		t.Fatal("no cancellation was published")
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// A cancellation names a session by the rule every task does; Cancel refuses another
// ID with ErrBadTask before it reaches any session.
func TestCancelRefusesAnInvalidSessionID(t *testing.T) {
	n := nodetest.Start(t, node.Config{})
	for _, id := range []string{"", "a/b", "has space"} {
		if err := n.Cancel(context.Background(), id, "why"); !errors.Is(err, node.ErrBadTask) || !strings.Contains(err.Error(), "session_id") {
			t.Errorf("Cancel(%q) = %v, want ErrBadTask naming session_id", id, err)
		}
	}
}

// A cancellation's reason is recorded in the task's end (task.failed) and sent to
// every watcher: like an approval's, it is at most 4096 bytes of UTF-8. A longer one,
// or bytes that are not UTF-8 (from the Go API, or in a task.cancel from any Kafka
// client, where encoding/json would turn them into U+FFFD), is refused with
// ErrBadTask naming the reason, and the running task goes on.
func TestCancelRefusesAHostileReason(t *testing.T) {
	block := newBlockingTool()
	n := nodetest.Start(t, node.Config{Model: blockScript(t), Tools: []tools.Tool{block}})
	if _, err := n.Submit(context.Background(), node.Task{Input: "block", SessionID: "hostile-cancel"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-block.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool was never called")
	}
	for name, reason := range map[string]string{
		"huge":         strings.Repeat(`"\<script>`, 1<<20),
		"one too many": strings.Repeat("é", 2048) + "x",
		"not UTF-8":    "stop \xff\xfe now",
	} {
		if err := n.Cancel(context.Background(), "hostile-cancel", reason); !errors.Is(err, node.ErrBadTask) || !strings.Contains(err.Error(), "reason") {
			t.Errorf("%s: Cancel = %v, want ErrBadTask naming the reason", name, err)
		}
	}
	for name, payload := range map[string]string{
		"not UTF-8": "{\"v\":1,\"session_id\":\"hostile-cancel\",\"reason\":\"stop \xff now\"}",
		"huge":      `{"v":1,"session_id":"hostile-cancel","reason":"` + strings.Repeat(`\u0000\"`, 1<<12) + `"}`,
	} {
		if _, err := n.Ingress().DecodeCancel(node.Arrival{Source: node.SourceBus, Payload: []byte(payload)}); !errors.Is(err, node.ErrBadTask) {
			t.Errorf("%s task.cancel: DecodeCancel = %v, want ErrBadTask", name, err)
		}
	}
	events, err := n.Log().Read(context.Background(), "hostile-cancel", 1)
	if err != nil || len(events) == 0 || events[len(events)-1].Type != messages.TypeToolCallRequested || len(block.causes) != 0 {
		t.Fatalf("a refused cancellation changed the session: %d events (%v), the tool's context ended: %v", len(events), err, len(block.causes) != 0)
	}
	// Within the bounds, control characters and all, the reason is recorded as given.
	reason := "stop\x00 \"now\" \u2028<b>" + strings.Repeat("é", 2000)
	if err := n.Cancel(context.Background(), "hostile-cancel", reason); err != nil {
		t.Fatal(err)
	}
	events = waitFailed(t, n, "hostile-cancel", messages.ReasonCancelled)
	p, err := events[len(events)-1].Decode()
	if err != nil || p.(*messages.TaskFailed).Error != reason {
		t.Fatalf("the recorded reason is not the one given: %v", err)
	}
}
