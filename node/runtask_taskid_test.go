package node_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// heldModel answers "done" once released, and tells when it is asked.
type heldModel struct {
	asked   chan struct{}
	release chan struct{}
	calls   atomic.Int32
}

func (*heldModel) Name() string { return "held" }

func (m *heldModel) Generate(ctx context.Context, _ llm.Request) (llm.Response, error) {
	m.calls.Add(1)
	m.asked <- struct{}{}
	select {
	case <-m.release:
	case <-ctx.Done():
		return llm.Response{}, ctx.Err()
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "done"}}, nil
}

// RunTask of a named task (Task.TaskID, MCP's run_task with a task_id) whose
// caller goes away (a timeout, a cancellation) leaves the task running: the
// caller that comes back with the same name waits for that task and gets its
// result, and one that comes after it ended gets its result at once. The task is
// recorded and run once.
func TestRunTaskNamedTaskOutlivesItsCaller(t *testing.T) {
	m := &heldModel{asked: make(chan struct{}, 16), release: make(chan struct{})}
	n := nodetest.Start(t, node.Config{Model: m})
	task := node.Task{Input: "go on without me", SessionID: "s-named", TaskID: "job-1"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	first, leave := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() {
		_, err := n.RunTask(first, task)
		gone <- err
	}()
	select {
	case <-m.asked:
	case <-ctx.Done():
		t.Fatal("the model was not asked within 30 s")
	}
	leave()
	select {
	case err := <-gone:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("RunTask whose context ended: %v, want context.Canceled", err)
		}
	case <-ctx.Done():
		t.Fatal("RunTask did not return within 30 s of its context's end")
	}

	// The caller comes back while the task runs, then the task's step ends.
	back := make(chan messages.TaskResult, 1)
	go func() {
		res, err := n.RunTask(ctx, task)
		if err != nil {
			t.Error(err)
		}
		back <- res
	}()
	close(m.release)
	for i, wait := range []<-chan messages.TaskResult{back, runAsync(t, ctx, n, task)} {
		select {
		case res := <-wait:
			if res.Status != messages.StatusCompleted || res.Output != "done" || res.SessionID != "s-named" || res.TaskID != "job-1" {
				t.Errorf("RunTask %d of the named task: %+v, want it completed with \"done\"", i+2, res)
			}
		case <-ctx.Done():
			t.Fatalf("RunTask %d of the named task did not answer within 30 s", i+2)
		}
	}
	// The third, after the task ended, answered at once from the log.
	if res := <-runAsync(t, ctx, n, task); res.Status != messages.StatusCompleted || res.Output != "done" {
		t.Errorf("RunTask after the task ended: %+v", res)
	}
	if got := m.calls.Load(); got != 1 {
		t.Errorf("the model was called %d times, want 1", got)
	}
	if got := tasksNamed(t, n, "s-named"); got["job-1"] != 1 || len(got) != 1 {
		t.Errorf("task.submitted events by task_id: %v, want job-1 once", got)
	}
}

// runAsync runs task on n and hands its result on the channel it returns.
func runAsync(t *testing.T, ctx context.Context, n *node.Node, task node.Task) <-chan messages.TaskResult {
	c := make(chan messages.TaskResult, 1)
	go func() {
		res, err := n.RunTask(ctx, task)
		if err != nil {
			t.Error(err)
		}
		c <- res
	}()
	return c
}

// RunTask of an unnamed task whose caller is gone for good (its context ended with
// the cause node.ErrCallerGone: an MCP client whose session closed) returns and
// leaves the task running, as after a restart of the node; a caller whose
// context merely ends cancels the task.
func TestRunTaskUnnamedTaskOutlivesACallerGone(t *testing.T) {
	m := &heldModel{asked: make(chan struct{}, 16), release: make(chan struct{})}
	n := nodetest.Start(t, node.Config{Model: m})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, leave := context.WithCancelCause(ctx)
	gone := make(chan error, 1)
	go func() {
		_, err := n.RunTask(first, node.Task{Input: "go on without me", SessionID: "s-unnamed"})
		gone <- err
	}()
	select {
	case <-m.asked:
	case <-ctx.Done():
		t.Fatal("the model was not asked within 30 s")
	}
	leave(node.ErrCallerGone)
	select {
	case err := <-gone:
		if !errors.Is(err, node.ErrCallerGone) {
			t.Fatalf("RunTask whose caller is gone: %v, want node.ErrCallerGone", err)
		}
	case <-ctx.Done():
		t.Fatal("RunTask did not return within 30 s of its context's end")
	}
	close(m.release)
	for {
		res, _, err := n.Status(ctx, "s-unnamed")
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != messages.StatusRunning {
			if res.Status != messages.StatusCompleted || res.Output != "done" {
				t.Errorf("the task: %+v, want it completed with \"done\" (not cancelled)", res)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the task did not end within 30 s")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
