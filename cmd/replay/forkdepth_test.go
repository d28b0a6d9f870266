package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A fork of a sub-agent's child session, no child of anyone, keeps the child's
// depth: a fork of a child at the depth bound cannot delegate, as the child
// could not (a fork started at depth 0 again, and each fork of a fork gave
// the tree node.MaxDelegationDepth more levels), and a fork of a child 1 deep
// delegates down to the bound and no further. The sessions recorded before
// verify as they ran.
func TestForkOfAChildSessionKeepsItsDepth(t *testing.T) {
	ctx := context.Background()
	n, stop, data, agentsFile := startSubagentsNode(t)
	// Each lead delegates the rest to another lead, 4 deep; the one at the
	// bound is refused.
	input := strings.Repeat("delegate to lead: ", node.MaxDelegationDepth) + "delegate to mathematician: What is 12 * (7 + 5)?"
	res, err := n.RunTask(ctx, node.Task{Input: input, SessionID: "lead-1", Agent: "lead"})
	stop()
	if err != nil || res.Status != messages.StatusCompleted {
		t.Fatalf("the root's task: %+v %v", res, err)
	}
	// below returns the chain of first children under id, deepest last, and the
	// sessions of the log.
	below := func(id string) ([]string, map[string][]messages.Envelope) {
		all := readAll(t, data)
		var chain []string
		for {
			next := ""
			for sid, evs := range all {
				for _, p := range taskPayloads(t, evs) {
					if p.Parent != nil && p.Parent.SessionID == id {
						next = sid
					}
				}
			}
			if next == "" {
				return chain, all
			}
			chain = append(chain, next)
			id = next
		}
	}
	refused := fmt.Sprintf("nest at most %d deep", node.MaxDelegationDepth)
	delegateError := func(evs []messages.Envelope) string {
		for _, e := range evs {
			if p, err := e.Decode(); err == nil {
				if c, ok := p.(*messages.ToolCallCompleted); ok && c.Tool == node.DelegateTool {
					return c.Error
				}
			}
		}
		return "(no delegate call)"
	}
	chain, all := below("lead-1")
	if len(chain) != node.MaxDelegationDepth {
		t.Fatalf("the recorded tree is %d deep (%v), want %d", len(chain), chain, node.MaxDelegationDepth)
	}
	deepest := chain[len(chain)-1]
	if got := delegateError(all[deepest]); !strings.Contains(got, refused) {
		t.Fatalf("the child at the bound, %s: its delegate call: %q, want refused", deepest, got)
	}

	// The fork of the child at the bound is refused as the child was.
	if code, _, errs := replay(t, "fork", deepest, "--at", "2", "--model", "offline", "--session", "limit-fork", "--agents", agentsFile, "--data", data); code != 0 {
		t.Fatalf("fork the child at the bound: exit %d: %s", code, errs)
	}
	forkChain, all := below("limit-fork")
	if len(forkChain) != 0 {
		t.Errorf("the fork of a child %d deep started sub-agents %v", node.MaxDelegationDepth, forkChain)
	}
	if got := delegateError(all["limit-fork"]); !strings.Contains(got, refused) {
		t.Errorf("the fork of the child at the bound: its delegate call: %q, want refused as the child's was", got)
	}
	if ts := taskPayloads(t, all["limit-fork"]); len(ts) == 0 {
		t.Errorf("the fork has no task")
	} else if ts[0].Parent != nil || ts[0].Depth != node.MaxDelegationDepth {
		t.Errorf("the fork's tasks: %d, the first's parent %+v and depth %d, want no parent and depth %d", len(ts), ts[0].Parent, ts[0].Depth, node.MaxDelegationDepth)
	}

	// A new task of a fork of the child at the bound (--input) is as deep.
	at := fmt.Sprint(len(all[deepest]))
	if code, _, errs := replay(t, "fork", deepest, "--at", at, "--input", "delegate to mathematician: What is 2 + 2?", "--model", "offline",
		"--session", "input-fork", "--agents", agentsFile, "--data", data); code != 0 {
		t.Fatalf("fork the child at the bound with a new task: exit %d: %s", code, errs)
	}
	forkChain, all = below("input-fork")
	ts := taskPayloads(t, all["input-fork"])
	if len(forkChain) != 0 || len(ts) != 2 || ts[1].Depth != node.MaxDelegationDepth {
		t.Errorf("the new task of a fork of the child at the bound: sub-agents %v, %d tasks, want its depth %d and no sub-agent", forkChain, len(ts), node.MaxDelegationDepth)
	}

	// The fork of the child 1 deep delegates down to the bound, no further.
	if code, _, errs := replay(t, "fork", chain[0], "--at", "2", "--model", "offline", "--session", "one-fork", "--agents", agentsFile, "--data", data); code != 0 {
		t.Fatalf("fork the child 1 deep: exit %d: %s", code, errs)
	}
	forkChain, all = below("one-fork")
	if want := node.MaxDelegationDepth - 1; len(forkChain) != want {
		t.Fatalf("the fork of a child 1 deep started a tree %d deep (%v), want %d", len(forkChain), forkChain, want)
	}
	if got := delegateError(all[forkChain[len(forkChain)-1]]); !strings.Contains(got, refused) {
		t.Errorf("the fork's descendant at the bound, %s: its delegate call: %q, want refused", forkChain[len(forkChain)-1], got)
	}

	// A fork of the fork at the bound is at the bound still.
	if code, _, errs := replay(t, "fork", "limit-fork", "--at", "2", "--model", "offline", "--session", "limit-fork-2", "--agents", agentsFile, "--data", data); code != 0 {
		t.Fatalf("fork the fork: exit %d: %s", code, errs)
	}
	if forkChain, all = below("limit-fork-2"); len(forkChain) != 0 || !strings.Contains(delegateError(all["limit-fork-2"]), refused) {
		t.Errorf("the fork of the fork at the bound: sub-agents %v, delegate call %q, want refused", forkChain, delegateError(all["limit-fork-2"]))
	}

	// The sessions recorded before the forks verify as they ran.
	for _, id := range append([]string{"lead-1"}, chain...) {
		if code, out, errs := replay(t, "verify", id, "--agents", agentsFile, "--data", data); code != 0 {
			t.Errorf("verify %s: exit %d: %s%s", id, code, out, errs)
		}
	}
}

// taskPayloads returns the task.submitted payloads of events.
func taskPayloads(t *testing.T, events []messages.Envelope) []*messages.TaskSubmitted {
	t.Helper()
	var out []*messages.TaskSubmitted
	for _, e := range events {
		if e.Type != messages.TypeTaskSubmitted {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.(*messages.TaskSubmitted))
	}
	return out
}
