package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// gateModel answers a task's input with "done INPUT", but never answers one that
// starts with "slow" (it waits for its call's context): such a task runs until it
// is cancelled. started says which inputs it was asked about.
type gateModel struct {
	mu      sync.Mutex
	started []string
}

func (m *gateModel) Name() string { return "gate" }

func (m *gateModel) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	var input string
	for _, msg := range r.Messages {
		if msg.Role == messages.RoleUser {
			input = msg.Content
		}
	}
	m.mu.Lock()
	m.started = append(m.started, input)
	m.mu.Unlock()
	if strings.HasPrefix(input, "slow") {
		<-ctx.Done()
		return llm.Response{}, ctx.Err()
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "done " + input}}, nil
}

func (m *gateModel) asked(input string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.started {
		if s == input {
			return true
		}
	}
	return false
}

// A session with five tasks queued, the first and the third cancelled while they
// run: it verifies, and a fork from each of its events continues every task left
// unfinished there and verifies.
func TestVerifyAndForkQueuedTasksSomeCancelled(t *testing.T) {
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
	data := filepath.Join(t.TempDir(), "data")
	m := &gateModel{}
	ctx := context.Background()
	n, err := node.New(ctx, node.Config{DataDir: data, Model: m})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inputs := []string{"slow 1", "fast 2", "slow 3", "fast 4", "fast 5"}
	for _, in := range inputs {
		if _, err := n.Submit(ctx, node.Task{Input: in, SessionID: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waited 10 s for %s", what)
			}
		}
	}
	for _, slow := range []string{"slow 1", "slow 3"} {
		wait(slow+" to reach the model", func() bool { return m.asked(slow) })
		if err := n.Cancel(ctx, "q", "enough"); err != nil {
			t.Fatal(err)
		}
	}
	var events []messages.Envelope
	wait("every task to end", func() bool {
		events, _ = n.Log().Read(ctx, "q", 1)
		ended := 0
		for _, e := range events {
			if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
				ended++
			}
		}
		return ended == len(inputs)
	})
	stop()
	n.Close()
	if code, out, errs := replay(t, "verify", "q", "--data", data); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify: exit %d\n%s%s", code, out, errs)
	}
	for at := 1; at < len(events); at++ {
		if unfinishedTasks(events[:at]) == 0 {
			continue
		}
		id := "q-fork-" + strconv.Itoa(at)
		code, out, errs := replay(t, "fork", "q", "--at", strconv.Itoa(at), "--session", id, "--data", data, "--model", "offline")
		if code != 0 {
			t.Errorf("fork at %d (%s): exit %d\n%s%s", at, events[at-1].Type, code, out, errs)
			continue
		}
		if code, out, errs := replay(t, "verify", id, "--data", data); code != 0 || !strings.Contains(out, "deterministic") {
			t.Errorf("verify the fork at %d: exit %d\n%s%s", at, code, out, errs)
		}
	}
}
