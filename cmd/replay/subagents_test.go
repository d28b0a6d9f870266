package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/internal/nodeconfig"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A parent that delegated to a sub-agent (examples/subagents.yaml, on the offline
// model): list shows the child session with its parent, show links the child on
// the parent's delegate call and names the parent on the child's, and each
// verifies as deterministic on its own against the agents file.
func TestSubagentSessions(t *testing.T) {
	ctx := context.Background()
	n, stop, data, agentsFile := startSubagentsNode(t)
	res, err := n.RunTask(ctx, node.Task{Input: "delegate to mathematician: What is 12 * (7 + 5)?", SessionID: "lead-1", Agent: "lead"})
	stop()
	if err != nil || res.Status != messages.StatusCompleted || res.Output != "144" {
		t.Fatalf("the parent's task: %+v %v", res, err)
	}
	child := node.ChildSessionID(messages.EffectKey{SessionID: "lead-1", Seq: 4})

	code, out, errs := replay(t, "list", "--data", data, "--json")
	var infos []eventlog.SessionInfo
	if code != 0 || json.Unmarshal([]byte(out), &infos) != nil {
		t.Fatalf("list --json: exit %d %s%s", code, out, errs)
	}
	parents := map[string]string{}
	for _, i := range infos {
		if i.Status != node.ConfigStatus { // the agents' configurations' streams
			parents[i.ID] = i.Parent
		}
	}
	if len(parents) != 2 || parents["lead-1"] != "" || parents[child] != "lead-1" || !strings.Contains(out, `"parent": "lead-1"`) {
		t.Errorf("list --json: %s", out)
	}
	if code, out, _ := replay(t, "list", "--data", data); code != 0 || !strings.Contains(out, "PARENT") {
		t.Errorf("list: exit %d\n%s", code, out)
	}
	if code, out, _ := replay(t, "show", "lead-1", "--data", data); code != 0 || !strings.Contains(out, "delegate → 144 [its sub-agent spent ") ||
		!strings.Contains(out, `"task":"What is 12 * (7 + 5)?"}) → child session `+child) || !strings.Contains(out, "completed: 144 [its sub-agents spent ") {
		t.Errorf("show the parent (what its sub-agent spent, on its call and its end): exit %d\n%s", code, out)
	}
	if code, out, _ := replay(t, "show", child, "--data", data); code != 0 || !strings.Contains(out, "child of lead-1") || !strings.Contains(out, "calculator → 144") {
		t.Errorf("show the child: exit %d\n%s", code, out)
	}
	if code, out, _ := replay(t, "show", "lead-1", "--data", data, "--json"); code != 0 || !strings.Contains(out, `"child_session": "`+child+`"`) {
		t.Errorf("show --json the parent: exit %d\n%s", code, out)
	}
	for _, id := range []string{"lead-1", child} {
		if code, out, errs := replay(t, "verify", id, "--data", data, "--agents", agentsFile); code != 0 || !strings.Contains(out, "deterministic") {
			t.Errorf("verify %s: exit %d\n%s%s", id, code, out, errs)
		}
	}
}

// startSubagentsNode starts a node on a new data directory with the agents of
// examples/subagents.yaml (on the offline model, with no skills, disclosure or
// agents from the environment), and returns it, its stop, the directory and the
// agents file's path.
func startSubagentsNode(t *testing.T) (n *node.Node, stop func(), data, agentsFile string) {
	t.Helper()
	t.Setenv("TROUPE_SKILLS", "")
	t.Setenv("TROUPE_DISCLOSURE", "")
	t.Setenv("TROUPE_AGENTS", "")
	data = t.TempDir()
	agentsFile = filepath.Join("..", "..", "examples", "subagents.yaml")
	file, err := nodeconfig.LoadAgents(agentsFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n, err = node.New(ctx, node.Config{DataDir: data, Agents: file.NodeAgents()})
	if err != nil {
		t.Fatal(err)
	}
	stop, err = n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n, stop, data, agentsFile
}
