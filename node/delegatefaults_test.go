package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A node stopped (as a kill) while a reply's 8 delegate calls run 4 at a time:
// the next node runs each child once, and the parent gets each answer once.
func TestDelegateFanOutRestart(t *testing.T) {
	dir := t.TempDir()
	held := make(chan struct{})
	t.Cleanup(func() { close(held) })
	steps := map[string][]llm.ScriptStep{"lead": {delegateCalls(8, "helper"), {Content: "gathered"}}, "helper": {{Content: "ok"}}}
	first := newByAgent(t, steps)
	first.hold = func(agent string, _ int) <-chan struct{} {
		if agent == "helper" {
			return held
		}
		return nil
	}
	cfg1 := subagentsConfig(first)
	cfg1.DataDir, cfg1.HandoffGrace = dir, heldCallGrace
	_, stop1 := startWithTask(t, cfg1, node.Task{Input: "go", SessionID: "boss", Agent: "lead"})
	waitFor(t, 10*time.Second, "4 children's model calls", func() bool { return first.callsOf("helper") >= 4 })
	time.Sleep(100 * time.Millisecond)
	stop1()
	t.Logf("first node: helper calls %d", first.callsOf("helper"))

	second := newByAgent(t, steps)
	cfg2 := subagentsConfig(second)
	cfg2.DataDir = dir
	n2 := nodetest.Start(t, cfg2)
	var parent []messages.Envelope
	waitFor(t, 20*time.Second, "the parent's task to end", func() bool {
		parent = readAll(t, n2.Log(), "boss")
		last := parent[len(parent)-1].Type
		return last == messages.TypeTaskCompleted || last == messages.TypeTaskFailed
	})
	byCall := map[string]int{}
	for _, c := range payloads[*messages.ToolCallCompleted](t, parent) {
		byCall[c.CallID]++
		if c.Error != "" || c.Result != "ok" {
			t.Errorf("call %s: %+v", c.CallID, c)
		}
	}
	if len(byCall) != 8 {
		t.Errorf("the parent has answers to %d calls: %v", len(byCall), byCall)
	}
	for id, k := range byCall {
		if k != 1 {
			t.Errorf("call %s answered %d times", id, k)
		}
	}
	for i := range 8 {
		_ = i
	}
	for c, k := range second.performed() {
		if k != 1 {
			t.Errorf("model call %+v performed %d times on the second node", c, k)
		}
	}
	t.Logf("second node: helper calls %d, lead %d", second.callsOf("helper"), second.callsOf("lead"))
	all, _ := cfg2.AllAgents()
	if div, err := actors.VerifyAmong(all, parent); err != nil || div != nil {
		t.Errorf("verify: %+v %v", div, err)
	}
	infos := 0
	for i := 4; i < 40; i++ {
		if ev := readAll(t, n2.Log(), fmt.Sprintf("boss.sub%d", i)); len(ev) > 0 {
			infos++
			if n := len(payloads[*messages.TaskSubmitted](t, ev)); n != 1 {
				t.Errorf("boss.sub%d has %d tasks", i, n)
			}
		}
	}
	if infos != 8 {
		t.Errorf("%d child sessions, want 8", infos)
	}
}

// panicky is a model that panics for one agent.
type panicky struct{ *byAgent }

func (p panicky) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	if r.Scope.Agent == "flaky" {
		panic("the model library blew up")
	}
	return p.byAgent.Generate(ctx, r)
}

// A child whose model panics: the parent gets a clear error and goes on.
func TestDelegateChildModelPanics(t *testing.T) {
	model := panicky{newByAgent(t, map[string][]llm.ScriptStep{
		"lead": {delegateCall("d1", "flaky", "anything"), {Content: "carried on"}},
	})}
	n := nodetest.Start(t, subagentsConfig(model))
	events := runAgentTask(t, n, node.Task{Input: "go", SessionID: "p", Agent: "lead", DeadlineMS: 20_000})
	res := delegateResult(t, events)
	t.Logf("result: %+v", res)
	if res.Error == "" || !strings.Contains(res.Error, "p.sub4") {
		t.Errorf("the delegate call to a panicking child: %+v", res)
	}
	if ended := payloads[*messages.TaskCompleted](t, events); len(ended) != 1 {
		t.Errorf("the parent did not go on: %s", typesOf(events))
	}
}

// 200 delegate calls in one reply: another session answers meanwhile.
func TestDelegateFanOut200StaysResponsive(t *testing.T) {
	held := make(chan struct{})
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead":   {delegateCalls(200, "helper"), {Content: "gathered"}},
		"helper": {{Content: "ok"}},
		"brief":  {{Content: "quick"}},
	})
	model.hold = func(agent string, _ int) <-chan struct{} {
		if agent == "helper" {
			return held
		}
		return nil
	}
	n := nodetest.Start(t, subagentsConfig(model))
	if _, err := n.Submit(context.Background(), node.Task{Input: "go", SessionID: "wide", Agent: "lead"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "children", func() bool { return model.callsOf("helper") >= 4 })
	events := runAgentTask(t, n, node.Task{Input: "hi", SessionID: "other", Agent: "brief"})
	if ended := payloads[*messages.TaskCompleted](t, events); len(ended) != 1 {
		t.Errorf("another session: %s", typesOf(events))
	}
	t.Logf("helper calls while held: %d", model.callsOf("helper"))
	close(held)
	var parent []messages.Envelope
	waitFor(t, 60*time.Second, "the parent", func() bool {
		parent = readAll(t, n.Log(), "wide")
		last := parent[len(parent)-1].Type
		return last == messages.TypeTaskCompleted || last == messages.TypeTaskFailed
	})
	t.Logf("parent: %d events, last %s, helper calls %d", len(parent), parent[len(parent)-1].Type, model.callsOf("helper"))
}
