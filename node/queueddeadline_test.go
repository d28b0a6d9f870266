package node_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A task queued behind one that waits (here for a human's approval, with no
// timeout: for ever) fails at its own deadline with reason deadline, as the
// README's stop conditions say every task does (decision rules 10); it does not
// wait, "running", for the task ahead of it to end. The task ahead goes on, the
// session stays running (its status, the API's and the log's), and once that
// task ends the session's status is its; the session verifies.
func TestQueuedTaskFailsAtItsDeadline(t *testing.T) {
	var sent atomic.Int64
	cfg := mailer(t, &sent)
	n := nodetest.Start(t, cfg)
	ctx := context.Background()
	if _, err := n.Submit(ctx, node.Task{Input: "mail bob", SessionID: "queued-deadline", Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	p := waitApproval(t, n, "queued-deadline")
	if _, err := n.Submit(ctx, node.Task{Input: "quick", SessionID: "queued-deadline", DeadlineMS: 200}); err != nil {
		t.Fatal(err)
	}
	var failed []*messages.TaskFailed
	waitFor(t, 10*time.Second, "the queued task's failure at its 200 ms deadline", func() bool {
		failed = payloads[*messages.TaskFailed](t, readAll(t, n.Log(), "queued-deadline"))
		return len(failed) > 0
	})
	if f := failed[0]; f.Reason != messages.ReasonDeadline || f.Steps != 0 || !f.Usage.IsZero() {
		t.Errorf("the queued task failed %+v, want reason deadline with no steps nor usage", f)
	}
	st, ok, err := n.Status(ctx, "queued-deadline")
	if err != nil || !ok || st.Status != messages.StatusRunning {
		t.Errorf("with the first task waiting for its approval, the session's status is %+v (%v)", st, err)
	}
	infos, err := n.Log().Sessions(ctx, eventlog.Filter{Status: messages.StatusRunning})
	if err != nil {
		t.Fatal(err)
	}
	if !hasSession(infos, "queued-deadline") {
		t.Errorf("the log does not list the session as running: %+v", infos)
	}
	if err := n.Approve(ctx, "queued-deadline", p.Call, true, "", messages.ApprovedByAPI); err != nil {
		t.Fatal(err)
	}
	events := waitEnded(t, n, "queued-deadline")
	if c := payloads[*messages.TaskCompleted](t, events); len(c) != 1 || c[0].Output != "handled" {
		t.Fatalf("the first task did not complete once approved: %s", eventTypes(events))
	}
	if st, _, _ := n.Status(ctx, "queued-deadline"); st.Status != messages.StatusCompleted {
		t.Errorf("all ended, the first task's end the latest: the session's status is %+v", st)
	}
	agents, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := actors.VerifyAmong(agents, events); err != nil || div != nil {
		t.Fatalf("replay verify: %v %v", div, err)
	}
}

func hasSession(infos []eventlog.SessionInfo, id string) bool {
	for _, s := range infos {
		if s.ID == id {
			return true
		}
	}
	return false
}
