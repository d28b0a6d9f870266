package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A fork of a sub-agent's child session is no child of the child's parent: list
// gives it no parent (it named the child's, as if that session had delegated
// it, and a node took it for one of that session's sub-agents), show says where
// it was forked from and not "child of", and its task carries no parent, which
// ingress refuses on a session that is not its call's child.
func TestForkOfAChildSessionIsNoChildOfItsParent(t *testing.T) {
	ctx := context.Background()
	n, stop, data, agentsFile := startSubagentsNode(t)
	res, err := n.RunTask(ctx, node.Task{Input: "delegate to mathematician: What is 12 * (7 + 5)?", SessionID: "lead-1", Agent: "lead"})
	stop()
	if err != nil || res.Status != messages.StatusCompleted {
		t.Fatalf("the parent's task: %+v %v", res, err)
	}
	child := node.ChildSessionID(messages.EffectKey{SessionID: "lead-1", Seq: 4})
	if code, _, errs := replay(t, "fork", child, "--at", "2", "--model", "offline", "--session", "child-fork", "--agents", agentsFile, "--data", data); code != 0 {
		t.Fatalf("fork the child: exit %d: %s", code, errs)
	}
	code, out, errs := replay(t, "list", "--data", data, "--json")
	var infos []eventlog.SessionInfo
	if code != 0 || json.Unmarshal([]byte(out), &infos) != nil {
		t.Fatalf("list --json: exit %d %s%s", code, out, errs)
	}
	parents := map[string]string{}
	for _, i := range infos {
		parents[i.ID] = i.Parent
	}
	if _, ok := parents["child-fork"]; !ok || parents["child-fork"] != "" || parents[child] != "lead-1" {
		t.Errorf("list --json: the fork's parent %q (want none), the child's %q (want lead-1):\n%s", parents["child-fork"], parents[child], out)
	}
	code, out, errs = replay(t, "show", "child-fork", "--data", data)
	if code != 0 || strings.Contains(out, "child of") || !strings.Contains(out, "forked from "+child+" at seq 2") {
		t.Errorf("show the fork: exit %d: want it forked from %s, no child of anyone:\n%s%s", code, child, out, errs)
	}
}
