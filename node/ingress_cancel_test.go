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
