package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// RunTask on a sharded node only publishes its task: the session's owner records
// it later. A caller that goes away before the owner recorded it still cancels it:
// the cancellation, naming the task, follows it on the session's partition. Before,
// the cancellation was sent only when the session's log showed a task running, and
// a task not yet recorded (here, of a new session) ran on with nothing to cancel it.
func TestShardedRunTaskCancelledBeforeItsTaskIsRecordedCancelsIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bus := node.NewEmbeddedBus(watermill.NopLogger{})
	t.Cleanup(func() { _ = bus.Close() })
	tasks, err := bus.Subscribe(ctx, messages.TopicTasks)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(ctx, node.Config{DataDir: t.TempDir(), Log: sharedLog(t), Roles: node.RoleClient,
		Bus: &node.Bus{Publisher: bus, Tasks: bus, Live: bus, Sharded: true, Partition: func(string, int) int { return 0 }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	caller, leave := context.WithCancel(ctx)
	defer leave()
	gone := make(chan error, 1)
	go func() {
		_, err := n.RunTask(caller, node.Task{Input: "never mind", SessionID: "s-sharded-gone"})
		gone <- err
	}()
	var task string
	select {
	case msg := <-tasks:
		msg.Ack()
		task = msg.UUID
	case <-ctx.Done():
		t.Fatal("no task was published")
	}
	leave()
	select {
	case msg := <-tasks:
		msg.Ack()
		c, err := messages.DecodeCancelRequest(msg.Payload)
		if err != nil || c.SessionID != "s-sharded-gone" || c.TaskID != task {
			t.Fatalf("published %+v, %v; want the cancellation of task %s", c, err, task)
		}
	case err := <-gone:
		t.Fatalf("RunTask returned (%v) and no cancellation was published for its task", err)
	case <-ctx.Done():
		t.Fatal("no cancellation was published for the task whose caller went away")
	}
	select {
	case err := <-gone:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("RunTask: %v, want context.Canceled", err)
		}
	case <-ctx.Done():
		t.Fatal("RunTask did not return after its context ended")
	}
}
