package node_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// taskAppendHeld is a log whose append of session's task (its task.submitted
// event) waits until release is closed; held is closed once it waits.
type taskAppendHeld struct {
	eventlog.Log
	session string
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (l *taskAppendHeld) Append(ctx context.Context, events []messages.Envelope) error {
	for _, e := range events {
		if e.SessionID == l.session && e.Type == messages.TypeTaskSubmitted {
			l.once.Do(func() {
				close(l.held)
				<-l.release
			})
			break
		}
	}
	return l.Log.Append(ctx, events)
}

// RunTask whose context ends while its task is being recorded (the session
// has it, and records it after) cancels the task once it is recorded. Before,
// RunTask returned at once with "waiting for the session to record it", and
// the task, recorded after, ran on with nothing to cancel it: an MCP client's
// run_task cancelled (notifications/cancelled) just as its task started kept
// running (TestServerHTTPGoSDKRunTaskCutAndCancelled failed so under load).
func TestRunTaskCancelledWhileItsTaskIsRecordedCancelsIt(t *testing.T) {
	log := &taskAppendHeld{Log: sharedLog(t), session: "s-cut-short", held: make(chan struct{}), release: make(chan struct{})}
	m := &heldModel{asked: make(chan struct{}, 16), release: make(chan struct{})}
	defer close(m.release)
	n := nodetest.Start(t, node.Config{Model: m, Log: log})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	caller, leave := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() {
		_, err := n.RunTask(caller, node.Task{Input: "never mind", SessionID: "s-cut-short"})
		gone <- err
	}()
	select {
	case <-log.held:
	case <-ctx.Done():
		t.Fatal("the task was not being recorded within 30 s")
	}
	leave()
	close(log.release)
	select {
	case err := <-gone:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("RunTask cancelled: %v, want context.Canceled", err)
		}
	case <-ctx.Done():
		t.Fatal("RunTask did not return within 30 s of its context's end")
	}
	for {
		st, _, err := n.Status(ctx, "s-cut-short")
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != messages.StatusRunning && st.Status != "" {
			if st.Status != messages.StatusFailed || st.Reason != messages.ReasonCancelled || !strings.Contains(st.Error, "went away") {
				t.Errorf("the task: %+v, want it failed, cancelled because its caller went away", st)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the task did not end within 30 s of its caller's cancellation: %+v", st)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
