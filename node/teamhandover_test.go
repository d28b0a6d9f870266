package node_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// bigTeamTask is a task the ingress takes (under 1 MiB) whose team's hand-over,
// the task with the team's brief, is past the delegate tool's bound on arguments.
func bigTeamTask() string {
	return "Write a haiku about tea. " + strings.Repeat("tea ", (1<<20-100)/4)
}

// teamsNode starts a node of examples/teams.yaml on the offline model, recording
// its tasks under decision rules pin (0: this build's).
func teamsNode(t *testing.T, pin int) (*node.Node, actors.Agents) {
	t.Helper()
	file, err := nodeconfig.LoadAgents(filepath.Join("..", "examples", "teams.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{Model: llm.Offline{}, Agents: file.NodeAgents(), DecisionRules: pin}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	return nodetest.Start(t, cfg), all
}

// From decision rules 11 a team bounds its hand-overs (actors.MaxHandOverArguments):
// a task near the ingress's 1 MiB reaches each member cut in its middle, its head
// and tail kept around a note, and every pattern completes, where under rules 10
// the hand-over's arguments were past the delegate tool's bound and the team
// failed (member_failed) on them. The team's session verifies.
func TestTeamHandsOverAnInputNear1MiB(t *testing.T) {
	n, all := teamsNode(t, 0)
	input := bigTeamTask()
	for _, team := range []string{"desk", "compute_then_write", "panel", "frontdesk"} {
		session := "big-" + strings.ReplaceAll(team, "_", "-")
		res, err := n.RunTask(context.Background(), node.Task{Input: input, SessionID: session, Agent: team})
		if err != nil || res.Status != messages.StatusCompleted {
			t.Errorf("team %s: %v status %s reason %s error %.300s", team, err, res.Status, res.Reason, res.Error)
			continue
		}
		events := readAll(t, n.Log(), session)
		ids, _ := teamChildren(t, events)
		if len(ids) == 0 {
			t.Fatalf("team %s handed over nothing", team)
		}
		for _, r := range payloads[*messages.ToolCallRequested](t, events) {
			if len(r.Arguments) > actors.MaxHandOverArguments {
				t.Errorf("team %s: a hand-over of %d bytes", team, len(r.Arguments))
			}
		}
		if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
			t.Errorf("team %s: verify: %+v %v", team, div, err)
		}
		task, _ := childTask(t, n, ids[0])
		at := strings.Index(task.Input, "\n[… ")
		if !strings.HasPrefix(task.Input, "Write a haiku about tea. tea") || at < 0 ||
			!strings.Contains(task.Input[at:min(at+200, len(task.Input))], " bytes of the team's task cut here: a hand-over carries at most 1048576 bytes]\n") ||
			len(task.Input) < 1<<20-64<<10 || len(task.Input) > 1<<20 {
			t.Errorf("team %s: its first member's task is %d bytes: %.100s … %.160q", team, len(task.Input), task.Input, task.Input[max(at-10, 0):])
		}
	}
}

// A team task recorded under decision rules 10 hands over as it did: whole, past
// the delegate tool's bound, and the team fails on it.
func TestTeamHandOverUnderRules10AsBefore(t *testing.T) {
	n, _ := teamsNode(t, 10)
	res, err := n.RunTask(context.Background(), node.Task{Input: bigTeamTask(), SessionID: "big-desk", Agent: "desk"})
	if err != nil || res.Status != messages.StatusFailed || res.Reason != messages.ReasonMemberFailed ||
		!strings.Contains(res.Error, "invalid arguments: the arguments are") {
		t.Fatalf("%v status %s reason %s error %.300s", err, res.Status, res.Reason, res.Error)
	}
}
