package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// hourAgo is a clock an hour behind: what a node recorded with it, a fork made
// now finds an hour old.
type hourAgo struct{}

func (hourAgo) Now() time.Time { return time.Now().Add(-time.Hour) }

// recordAnHourAgo runs cfg's node on hourAgo's clock, submits task and waits, up
// to a minute, until the session holds an event of type until; it returns that
// event's seq once the node is closed.
func recordAnHourAgo(t *testing.T, cfg node.Config, task node.Task, until messages.Type) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg.Clock = hourAgo{}
	n, err := node.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Submit(ctx, task); err != nil {
		t.Fatal(err)
	}
	var at uint64
	for at == 0 {
		events, err := n.Log().Read(ctx, task.SessionID, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if e.Type == until {
				at = e.Seq
			}
		}
		if at == 0 && ctx.Err() != nil {
			t.Fatalf("session %s: no %s in a minute", task.SessionID, until)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	return at
}

// A fork goes on with the time its task had left at the seq it was made at: a
// task recorded an hour ago with a minute's deadline_ms, forked at its first model
// request, failed at once with reason deadline, no model called.
func TestForkOfATaskWithADeadlineGoesOn(t *testing.T) {
	walkEnv(t)
	data := t.TempDir()
	recordAnHourAgo(t, node.Config{DataDir: data},
		node.Task{Input: "What is 12 * (7 + 5)?", SessionID: "timed", DeadlineMS: 60_000}, messages.TypeTaskCompleted)
	code, out, errs := replay(t, "fork", "timed", "--at", "2", "--session", "timed-fork", "--data", data, "--model", "offline")
	if code != 0 || !strings.Contains(out, "answer: 144") {
		t.Fatalf("fork: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := replay(t, "verify", "timed-fork", "--data", data); code != 0 {
		t.Errorf("verify the fork: exit %d\n%s%s", code, out, errs)
	}
}

// A fork of a session that waits for an approval asks for it (here, without a
// terminal, rejects it saying so) however long ago the approval was asked: one
// asked an hour ago under a 10-minute approval_timeout was rejected by its
// timeout the moment the fork went on, and the answer asked for refused.
func TestForkOfAnApprovalAskedLongAgoAsksIt(t *testing.T) {
	walkEnv(t)
	data := t.TempDir()
	agentsFile := filepath.Join("..", "..", "examples", "approvals.yaml")
	file, err := nodeconfig.LoadAgents(agentsFile)
	if err != nil {
		t.Fatal(err)
	}
	at := recordAnHourAgo(t, node.Config{DataDir: data, Agents: file.NodeAgents()},
		node.Task{Input: "What is 6 * 7?", SessionID: "waited", Agent: "careful"}, messages.TypeApprovalRequested)
	code, out, errs := replay(t, "fork", "waited", "--at", fmt.Sprint(at), "--session", "waited-fork", "--data", data,
		"--agents", agentsFile, "--model", "offline")
	if code != 0 || !strings.Contains(out, "no terminal: the call of calculator is rejected") || strings.Contains(out+errs, "timeout") {
		t.Fatalf("fork: exit %d\n%s%s", code, out, errs)
	}
}
