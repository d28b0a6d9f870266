package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A task with no parent that keeps a depth (messages.TaskSubmitted.Depth, a
// fork's of a child session) delegates from that depth: at the bound its
// delegate call is refused and no child starts; one level above it, its child
// is at the bound. An envelope published whole with a depth below 0 or past the
// bound, or with a depth beside its parent's, is refused as a bad task.
func TestTaskDepthWithoutAParentBoundsDelegation(t *testing.T) {
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead": {delegateCall("d1", "lead", "go deeper"), {Content: "done"}},
	})
	n := nodetest.Start(t, subagentsConfig(model))
	events := runAgentTask(t, n, node.Task{Input: "go deep", SessionID: "kept", Agent: "lead", Depth: node.MaxDelegationDepth})
	if ts := payloads[*messages.TaskSubmitted](t, events); len(ts) != 1 || ts[0].Depth != node.MaxDelegationDepth || ts[0].Parent != nil {
		t.Fatalf("the task recorded: %+v", ts)
	}
	if res := delegateResult(t, events); !strings.Contains(res.Error, fmt.Sprintf("nest at most %d deep", node.MaxDelegationDepth)) {
		t.Errorf("the delegate call of a task %d deep: %+v, want the depth error", node.MaxDelegationDepth, res)
	}
	if child := readAll(t, n.Log(), "kept.sub4"); len(child) != 0 {
		t.Errorf("a task at the bound started a child: %d events", len(child))
	}

	runAgentTask(t, n, node.Task{Input: "go deep", SessionID: "above", Agent: "lead", Depth: node.MaxDelegationDepth - 1})
	child := readAll(t, n.Log(), "above.sub4")
	if ts := payloads[*messages.TaskSubmitted](t, child); len(ts) != 1 || ts[0].Parent == nil || ts[0].Parent.Depth != node.MaxDelegationDepth || ts[0].Depth != 0 {
		t.Fatalf("the child of a task %d deep: %+v", node.MaxDelegationDepth-1, ts)
	}
	if res := delegateResult(t, child); !strings.Contains(res.Error, "nest at most") {
		t.Errorf("the child's delegate call: %+v, want the depth error", res)
	}

	for i, c := range []struct {
		depth  int
		parent bool
		want   string
	}{
		{-3, false, "depth -3"},
		{node.MaxDelegationDepth + 1, false, fmt.Sprintf("depth %d", node.MaxDelegationDepth+1)},
		{2, true, "depth 2 on a sub-agent's task"},
	} {
		p := map[string]any{"input": "go deep", "agent": "lead", "depth": c.depth}
		session, id := "forged", "forged-1"
		if c.parent {
			p["parent"] = map[string]any{"session_id": "nobody", "key": "nobody/1", "depth": 1}
			session, id = "nobody.sub1", "nobody/1/delegate"
		}
		payload, _ := json.Marshal(p)
		b, _ := json.Marshal(map[string]any{"id": id, "type": "task.submitted", "session_id": session, "payload": json.RawMessage(payload)})
		_, err := n.SubmitFrom(context.Background(), node.Arrival{Source: node.SourceBus, Payload: b, MessageID: id})
		if !errors.Is(err, node.ErrBadTask) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("case %d: %v; want a bad task naming %q", i, err, c.want)
		}
	}
}

// TaskDepth reads a depth out of its range, which no node records but an
// imported session (replay import) may hold, as the nearest in range: a
// parent's depth of 0 or below would give the tree under its child that many
// more levels of sub-agents, and a fork's --input task of a child past the
// bound would be refused for its depth.
func TestTaskDepthOutOfRange(t *testing.T) {
	for _, c := range []struct {
		task messages.TaskSubmitted
		want int
	}{
		{messages.TaskSubmitted{}, 0},
		{messages.TaskSubmitted{Depth: 3}, 3},
		{messages.TaskSubmitted{Depth: -3}, 0},
		{messages.TaskSubmitted{Depth: node.MaxDelegationDepth + 5}, node.MaxDelegationDepth},
		{messages.TaskSubmitted{Parent: &messages.ParentRef{Depth: 2}}, 2},
		{messages.TaskSubmitted{Parent: &messages.ParentRef{Depth: -5}}, 1},
		{messages.TaskSubmitted{Parent: &messages.ParentRef{Depth: 0}}, 1},
		{messages.TaskSubmitted{Parent: &messages.ParentRef{Depth: node.MaxDelegationDepth + 5}}, node.MaxDelegationDepth},
		{messages.TaskSubmitted{Parent: &messages.ParentRef{Depth: 2}, Depth: 4}, 2},
	} {
		if got := node.TaskDepth(&c.task); got != c.want {
			t.Errorf("TaskDepth(parent %+v, depth %d) = %d, want %d", c.task.Parent, c.task.Depth, got, c.want)
		}
	}
}

// A session keeps its depth for every task: a later task with no depth of its
// own (a client's, which names none, sent to a fork of a child session or to a
// child session itself) is recorded as deep as the session and delegates no
// deeper; before, it started again at depth 0, with MaxDelegationDepth more
// levels of sub-agents under it.
func TestLaterTaskOfASessionKeepsItsDepth(t *testing.T) {
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead":   {delegateCall("d1", "helper", "compute"), {Content: "done"}, delegateCall("d2", "helper", "compute"), {Content: "done again"}},
		"helper": helperScript,
	})
	n := nodetest.Start(t, subagentsConfig(model))
	runAgentTask(t, n, node.Task{Input: "go deep", SessionID: "kept", Agent: "lead", Depth: node.MaxDelegationDepth})
	events := runAgentTask(t, n, node.Task{Input: "go deep again", SessionID: "kept", Agent: "lead"})
	ts := payloads[*messages.TaskSubmitted](t, events)
	if len(ts) != 2 || ts[1].Depth != node.MaxDelegationDepth || ts[1].Parent != nil {
		t.Fatalf("the tasks recorded: %+v, want the second %d deep", ts, node.MaxDelegationDepth)
	}
	for _, c := range payloads[*messages.ToolCallCompleted](t, events) {
		if c.Tool == node.DelegateTool && !strings.Contains(c.Error, "nest at most") {
			t.Errorf("a delegate call of the session %d deep: %+v, want the depth error", node.MaxDelegationDepth, c)
		}
	}
	if calls := model.callsOf("helper"); calls != 0 {
		t.Errorf("a sub-agent of the session at the bound ran: %d model calls", calls)
	}
}
