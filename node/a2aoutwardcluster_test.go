package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// In a cluster, the node with the tools role performs a session's A2A call with
// the messageId the session's node named it by over the bus: the one its
// tool.requested event gives (EffectKey.Outward of its key, task and time), which
// any node that owns the session next reads from the shared log.
func TestA2ACallOverTheBusSendsTheNameTheLogGives(t *testing.T) {
	b, _ := a2aNode(t, node.Config{Model: echoModel{}})
	sent, remote := recordMessageIDs(t, b.Handler())
	newTool := func() tools.Tool {
		tool, err := a2a.NewTool(a2a.ToolConfig{Name: "b", CardURL: remote + a2a.CardPath})
		if err != nil {
			t.Fatal(err)
		}
		return tool
	}
	script := func() llm.Model {
		return a2aScript(t, llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "a2a__b", Arguments: `{"message":"hello B"}`}}},
			llm.ScriptStep{Content: "done"})
	}
	k, log, group := newKafkaEnv(t), sharedLog(t), uniqueGroup(t)
	agents, _ := clusterNode(t, k, group, log, "agents", node.RoleSessions|node.RoleModels, []tools.Tool{newTool()}, script())
	clusterNode(t, k, group, log, "workers", node.RoleTools, []tools.Tool{newTool()}, script())
	waitFor(t, 60*time.Second, "the agents node owns partitions", func() bool { return agents.PartitionsOwned() > 0 })
	session := fmt.Sprintf("support-%d", time.Now().UnixNano())
	if _, err := agents.Submit(context.Background(), node.Task{Input: "ask B", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, agents, []string{session}, 60*time.Second)
	events, err := log.Read(context.Background(), session, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, e := range events {
		if e.Type == messages.TypeToolCallRequested {
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			key, err := messages.ParseEffectKey(p.(*messages.ToolCallRequested).Key)
			if err != nil {
				t.Fatal(err)
			}
			want = key.Outward(e.CorrelationID, e.TS)
		}
	}
	if ids := sent.wait(t, 1); len(ids) != 1 || ids[0] != want || want == "" {
		t.Fatalf("the remote agent was sent the messageIds %q, want [%q]", ids, want)
	}
}

// A session that moves to another node of the cluster while its A2A call is out
// (its node stopped) is resumed there from the shared log, which sends the call
// again with the same messageId: the remote agent runs it once, and its running
// task answers the call.
func TestA2ACallHandedOverIsTheSameMessage(t *testing.T) {
	gate := &gateTool{started: make(chan struct{}, 4), open: make(chan struct{})}
	b, _ := a2aNode(t, node.Config{Tools: []tools.Tool{gate}, Model: a2aScript(t,
		llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "g1", Name: "gate", Arguments: "{}"}}},
		llm.ScriptStep{Content: "the remote task's one answer"})})
	sent, remote := recordMessageIDs(t, b.Handler())
	k, log, group := newKafkaEnv(t), sharedLog(t), uniqueGroup(t)
	start := func(name string) (*node.Node, func()) {
		tool, err := a2a.NewTool(a2a.ToolConfig{Name: "b", CardURL: remote + a2a.CardPath})
		if err != nil {
			t.Fatal(err)
		}
		return clusterNode(t, k, group, log, name, 0, []tools.Tool{tool}, a2aScript(t,
			llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "a2a__b", Arguments: `{"message":"hello B"}`}}},
			llm.ScriptStep{Content: "done"}))
	}
	first, stopFirst := start("first")
	waitFor(t, 60*time.Second, "the first node owns partitions", func() bool { return first.PartitionsOwned() > 0 })
	session := fmt.Sprintf("support-%d", time.Now().UnixNano())
	if _, err := first.Submit(context.Background(), node.Task{Input: "ask B", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gate.started:
	case <-time.After(60 * time.Second):
		t.Fatal("the remote agent's task never started")
	}
	second, _ := start("second")
	stopFirst() // the call is left unanswered in the log; the remote task runs on
	waitFor(t, 60*time.Second, "the second node owns partitions", func() bool { return second.PartitionsOwned() > 0 })
	ids := sent.wait(t, 2)
	if ids[0] != ids[1] || ids[0] == "" {
		t.Fatalf("the call was sent as %q, then by the session's next owner as %q: want one messageId", ids[0], ids[1])
	}
	close(gate.open)
	waitCompleted(t, second, []string{session}, 60*time.Second)
	if n := len(gate.started); n != 0 {
		t.Fatalf("the remote agent ran the call %d more times", n)
	}
}
