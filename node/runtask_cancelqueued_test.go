package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// RunTask whose task waits its turn behind another caller's task in the same
// session (two MCP clients' run_task with one session_id), and whose context
// ends, cancels its own task where it waits, not the one running. Before, it
// cancelled the session's running task, the other caller's, and its own ran
// after it.
func TestRunTaskCancelledWhileQueuedCancelsItsOwnTask(t *testing.T) {
	m := &heldModel{asked: make(chan struct{}, 16), release: make(chan struct{})}
	n := nodetest.Start(t, node.Config{Model: m})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	first := runAsync(t, ctx, n, node.Task{Input: "first", SessionID: "s-queue"})
	select {
	case <-m.asked:
	case <-ctx.Done():
		t.Fatal("the model was not asked within 30 s")
	}
	caller, leave := context.WithCancel(ctx)
	gone := make(chan error, 1)
	var second messages.TaskResult
	go func() {
		var err error
		second, err = n.RunTask(caller, node.Task{Input: "second", SessionID: "s-queue"})
		gone <- err
	}()
	// The second task is recorded, waiting its turn.
	for {
		events, err := n.Log().Read(ctx, "s-queue", 1)
		if err != nil {
			t.Fatal(err)
		}
		submitted := 0
		for _, e := range events {
			if e.Type == messages.TypeTaskSubmitted {
				submitted++
			}
		}
		if submitted == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the second task was not recorded within 30 s")
		case <-time.After(10 * time.Millisecond):
		}
	}
	leave()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the second RunTask: %v, want context.Canceled", err)
	}
	close(m.release)
	select {
	case res := <-first:
		if res.Status != messages.StatusCompleted {
			t.Errorf("the first task: %+v, want it completed (the second's caller cancelled the second)", res)
		}
	case <-ctx.Done():
		t.Fatal("the first task did not end within 30 s")
	}
	res, known, err := n.TaskResult(ctx, "s-queue", second.TaskID)
	if err != nil || !known || res.Status != messages.StatusFailed || res.Reason != messages.ReasonCancelled {
		t.Errorf("the second task: %+v %v %v, want it failed, cancelled", res, known, err)
	}
	if got := m.calls.Load(); got != 1 {
		t.Errorf("the model was asked %d times, want once (the second task never ran)", got)
	}
}

// A task recorded under decision rules older than 10 (a node pinned to them for a
// rolling upgrade: --decision-rules 9) is not failed while it waits its turn when
// its caller goes away: a build of those rules folds no task.failed of a queued
// task (it ignores it, and would run the task anyway, after its end was recorded),
// as it records none at a queued task's deadline (decideQueued). It runs in its
// turn, and nothing is recorded of the cancellation.
func TestRunTaskCancelledWhileQueuedUnderOlderRulesRecordsNothing(t *testing.T) {
	m := &heldModel{asked: make(chan struct{}, 16), release: make(chan struct{})}
	n := nodetest.Start(t, node.Config{Model: m, DecisionRules: 9})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	first := runAsync(t, ctx, n, node.Task{Input: "first", SessionID: "s-queue-9"})
	select {
	case <-m.asked:
	case <-ctx.Done():
		t.Fatal("the model was not asked within 30 s")
	}
	caller, leave := context.WithCancel(ctx)
	gone := make(chan error, 1)
	var second messages.TaskResult
	go func() {
		var err error
		second, err = n.RunTask(caller, node.Task{Input: "second", SessionID: "s-queue-9"})
		gone <- err
	}()
	for {
		events, err := n.Log().Read(ctx, "s-queue-9", 1)
		if err != nil {
			t.Fatal(err)
		}
		submitted := 0
		for _, e := range events {
			if e.Type == messages.TypeTaskSubmitted {
				submitted++
			}
		}
		if submitted == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the second task was not recorded within 30 s")
		case <-time.After(10 * time.Millisecond):
		}
	}
	leave()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the second RunTask: %v, want context.Canceled", err)
	}
	events, err := n.Log().Read(ctx, "s-queue-9", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.Type == messages.TypeTaskFailed {
			t.Fatalf("recorded %s for task %s while it waited its turn under rules 9", e.Type, e.CorrelationID)
		}
	}
	close(m.release)
	select {
	case res := <-first:
		if res.Status != messages.StatusCompleted {
			t.Errorf("the first task: %+v, want it completed", res)
		}
	case <-ctx.Done():
		t.Fatal("the first task did not end within 30 s")
	}
	for {
		res, _, err := n.TaskResult(ctx, "s-queue-9", second.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != messages.StatusRunning && res.Status != "" {
			if res.Status != messages.StatusCompleted {
				t.Errorf("the second task: %+v, want it completed in its turn", res)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the second task did not end within 30 s: %+v", res)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
