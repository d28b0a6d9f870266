package node_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// handoffNoteNode starts a node of a handoff team whose first member hands the
// conversation over with a note of 250 KiB of "<" (6 bytes each as JSON), its
// tasks recorded under decision rules pin (0: this build's).
func handoffNoteNode(t *testing.T, pin int) (*node.Node, actors.Agents) {
	t.Helper()
	refunded := llm.ScriptStep{Content: "refunded"}
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"triage":  {{Content: "A refund question.\nHANDOFF: billing: " + strings.Repeat("<", 250<<10)}},
		"billing": {refunded, refunded, refunded}, // a compression call may come first
	})
	cfg := node.Config{Model: model, DecisionRules: pin, Agents: []node.NamedAgent{
		{Name: "triage", Tools: []string{}}, {Name: "billing", Tools: []string{}},
		{Name: "line", Team: &actors.Team{Pattern: actors.TeamHandoff, Members: []actors.TeamMember{{Name: "triage"}, {Name: "billing"}}}},
	}}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	return nodetest.Start(t, cfg), all
}

// From decision rules 14 a handoff's note reaches the peer cut to
// actors.MaxHandoffNote (the whole answer is in the team's state): a member's
// last line of 250 KiB of "<" hands the conversation over within the delegate
// tool's bound, and the team completes, where under 13 the note went whole into
// the peer's task, a hand-over of 1.5 MiB, and the team failed (member_failed)
// on arguments no one wrote. The team's session verifies.
func TestHandoffWithAHugeNoteHandsOverWithinTheBound(t *testing.T) {
	n, all := handoffNoteNode(t, 0)
	res, err := n.RunTask(context.Background(), node.Task{Input: "I want a refund.", SessionID: "s-line", Agent: "line"})
	if err != nil || res.Status != messages.StatusCompleted || res.Output != "refunded" {
		t.Fatalf("%v status %s reason %s error %.300s", err, res.Status, res.Reason, res.Error)
	}
	events := readAll(t, n.Log(), "s-line")
	ids, _ := teamChildren(t, events)
	if len(ids) != 2 {
		t.Fatalf("hand-overs to %v, want triage's and billing's", ids)
	}
	for _, r := range payloads[*messages.ToolCallRequested](t, events) {
		if len(r.Arguments) > actors.MaxHandOverArguments {
			t.Errorf("a hand-over of %d bytes", len(r.Arguments))
		}
	}
	task, _ := childTask(t, n, ids[1])
	note := "Note: triage handed the conversation to you: " + strings.Repeat("<", actors.MaxHandoffNote) + " […"
	if !strings.Contains(task.Input, note) || strings.Contains(task.Input, note[:len(note)-4]+"<") {
		t.Errorf("billing's task does not carry the note cut to %d bytes", actors.MaxHandoffNote)
	}
	if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
		t.Errorf("verify: %+v %v", div, err)
	}
}

// A handoff team's task recorded under decision rules 13 hands the note over
// whole, as it did, and fails on the hand-over's size.
func TestHandoffNoteUnderRules13AsBefore(t *testing.T) {
	n, all := handoffNoteNode(t, 13)
	res, err := n.RunTask(context.Background(), node.Task{Input: "I want a refund.", SessionID: "s-line", Agent: "line"})
	if err != nil || res.Status != messages.StatusFailed || res.Reason != messages.ReasonMemberFailed ||
		!strings.Contains(res.Error, "invalid arguments: the arguments are") {
		t.Fatalf("%v status %s reason %s error %.300s", err, res.Status, res.Reason, res.Error)
	}
	if div, err := actors.VerifyAmong(all, readAll(t, n.Log(), "s-line")); err != nil || div != nil {
		t.Errorf("verify: %+v %v", div, err)
	}
}
