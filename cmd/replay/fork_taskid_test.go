package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// runNamed runs a task named taskID (node.Task.TaskID) in session on a node over
// dir, stopped when it returns, and answers its result.
func runNamed(t *testing.T, dir, session, taskID, input string) messages.TaskResult {
	t.Helper()
	n, err := node.New(context.Background(), node.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := n.RunTask(ctx, node.Task{Input: input, SessionID: session, TaskID: taskID})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A fork holds the parent's named tasks (task_id) as its own: the name sent again
// to the fork is the task the fork copied, answered with its result, not a second
// task of the same name run in the fork (the copy kept a "<fork>/<seq>" ID, which
// the ingress's ID for the name never matched).
func TestForkKeepsANamedTaskByItsName(t *testing.T) {
	dir := t.TempDir()
	if res := runNamed(t, dir, "named", "q-1", "What is 12 * (7 + 5)?"); res.Output != "144" || res.TaskID != "q-1" {
		t.Fatalf("the parent's task: %+v", res)
	}
	// Mid-task (the calculator asked for): the fork finishes the named task.
	if code, out, errs := replay(t, "fork", "named", "--at", "3", "--session", "child", "--data", dir); code != 0 || !strings.Contains(out, "answer: 144") {
		t.Fatalf("fork: %d\n%s\n%s", code, out, errs)
	}
	res := runNamed(t, dir, "child", "q-1", "What is 2 + 2?")
	if res.Status != messages.StatusCompleted || res.Output != "144" || res.TaskID != "q-1" {
		t.Fatalf("q-1 sent again to the fork answered %+v, want the fork's q-1 (144)", res)
	}
	submitted := 0
	for _, e := range readAll(t, dir)["child"] {
		if e.Type == messages.TypeTaskSubmitted {
			submitted++
		}
	}
	if submitted != 1 {
		t.Fatalf("the fork has %d tasks, want its one q-1", submitted)
	}
	if code, out, errs := replay(t, "verify", "child", "--data", dir); code != 0 {
		t.Fatalf("verify of the fork: %d\n%s\n%s", code, out, errs)
	}
}

// show names a named task: the task_id its result carries is how a user finds
// the task in a session's timeline.
func TestShowNamesANamedTask(t *testing.T) {
	dir := t.TempDir()
	runNamed(t, dir, "named", "q-1", "What is 12 * (7 + 5)?")
	code, out, errs := replay(t, "show", "named", "--data", dir)
	if code != 0 || !strings.Contains(out, "task q-1: What is 12") {
		t.Fatalf("show: %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = replay(t, "show", "--json", "--data", dir, "named")
	var tl Timeline
	if code != 0 || json.Unmarshal([]byte(out), &tl) != nil || len(tl.Roots) == 0 || tl.Roots[0].TaskID != "q-1" {
		t.Fatalf("show --json: %d\n%s\n%s", code, out, errs)
	}
}
