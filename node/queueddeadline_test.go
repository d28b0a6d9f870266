//go:build review

package node_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A task queued behind one that waits (here for a human's approval, with no
// timeout: for ever) fails at its own deadline with reason deadline, as the
// README's stop conditions say every task does; it does not wait, "running", for
// the task ahead of it to end. (Not fixed: failing a task that is not the running
// one is a decision of its own, and the logs' session status is that of the
// highest-seq task.* event, which a queued task's failure would no longer be.)
func TestQueuedTaskFailsAtItsDeadline(t *testing.T) {
	var sent atomic.Int64
	n := nodetest.Start(t, mailer(t, &sent))
	if _, err := n.Submit(context.Background(), node.Task{Input: "mail bob", SessionID: "queued-deadline", Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	waitApproval(t, n, "queued-deadline")
	if _, err := n.Submit(context.Background(), node.Task{Input: "quick", SessionID: "queued-deadline", DeadlineMS: 200}); err != nil {
		t.Fatal(err)
	}
	var events []messages.Envelope
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		events, _ = n.Log().Read(context.Background(), "queued-deadline", 1)
		if countType(events, messages.TypeTaskFailed) > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the queued task with a 200 ms deadline had not failed 10 s later: %s", eventTypes(events))
}
