//go:build review

package node_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A task the ingress takes (up to 1 MiB) given to a team: its members' tasks, the
// task and the team's brief, pass 1 MiB, and the team fails member_failed with
// "delegate: invalid arguments: the arguments are 1049684 bytes long", arguments
// the user never wrote.
func TestReviewTeamOfAnInputNear1MiB(t *testing.T) {
	file, err := nodeconfig.LoadAgents(filepath.Join("..", "examples", "teams.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{Model: llm.Offline{}, Agents: file.NodeAgents()})
	input := "Write a haiku about tea. " + strings.Repeat("tea ", (1<<20-100)/4)
	for _, team := range []string{"desk", "compute_then_write", "panel", "frontdesk"} {
		res, err := n.RunTask(context.Background(), node.Task{Input: input, SessionID: "big-" + strings.ReplaceAll(team, "_", "-"), Agent: team})
		t.Logf("%s: %v status %s reason %s error %.300s", team, err, res.Status, res.Reason, res.Error)
		if err == nil && strings.Contains(res.Error, "invalid arguments") {
			t.Errorf("team %s took a task of %d bytes and failed it on its own hand-over's size (%s): the ingress should refuse it, or the member get it",
				team, len(input), res.Reason)
		}
	}
}
