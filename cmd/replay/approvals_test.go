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

// A fork re-derives the keys of approval events with the calls' keys, so that the
// forked session's approvals name its own calls.
func TestForkRekeysApprovals(t *testing.T) {
	var parent []messages.Envelope
	for _, p := range []messages.Payload{
		&messages.TaskSubmitted{Input: "mail bob"},
		&messages.ToolCallRequested{Key: "p/2", CallID: "c1", Tool: "send_email", Arguments: "{}"},
		&messages.ApprovalRequested{Key: "p/2", CallID: "c1", Tool: "send_email", Arguments: "{}"},
		&messages.ApprovalResolved{Key: "p/2", Approve: true, By: messages.ApprovedByHTTP},
	} {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(len(parent) + 1)
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("p/%d", seq), "p", seq, int64(seq), "session"
		parent = append(parent, e)
	}
	out, err := forkEvents(parent, 4, "f", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range out[2:4] {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		key := ""
		switch p := p.(type) {
		case *messages.ApprovalRequested:
			key = p.Key
		case *messages.ApprovalResolved:
			key = p.Key
		}
		if key != "f/2" {
			t.Errorf("forked %s keyed %q, want f/2", e.Type, key)
		}
	}
}

// A fork of a session that waits for an approval (examples/approvals.yaml, on the
// offline model) asks for it as node run does: without a terminal, as here, it
// rejects the call at once, saying why, and the fork goes on to its end instead of
// waiting for an answer nobody can give.
func TestForkOfASessionWaitingForAnApprovalAnswersIt(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
	data := t.TempDir()
	agentsFile := filepath.Join("..", "..", "examples", "approvals.yaml")
	file, err := nodeconfig.LoadAgents(agentsFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.New(ctx, node.Config{DataDir: data, Agents: file.NodeAgents()})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Submit(ctx, node.Task{Input: "What is 6 * 7?", SessionID: "waits", Agent: "careful"}); err != nil {
		t.Fatal(err)
	}
	var at uint64
	for at == 0 {
		events, err := n.Log().Read(ctx, "waits", 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if e.Type == messages.TypeApprovalRequested {
				at = e.Seq
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the session never asked for an approval")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var code int
	var out, errs string
	go func() {
		defer close(done)
		code, out, errs = replay(t, "fork", "waits", "--at", fmt.Sprint(at), "--session", "waits-fork", "--data", data,
			"--agents", agentsFile, "--model", "offline")
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("replay fork never ended: it waits for an approval nobody can give")
	}
	if code != 0 || !strings.Contains(out, "no terminal: the call of calculator is rejected: replay fork has no terminal to ask on") ||
		!strings.Contains(out, "session waits-fork") {
		t.Errorf("fork: exit %d\n%s%s", code, out, errs)
	}
}
