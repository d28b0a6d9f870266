package node_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// Many tasks of an agent whose sub-agents delegate in turn, all at once: 1030 roots
// make 4 delegate calls each, whose children (held at a first tool call until
// 4096 of them run) each delegate once more. The roots' calls waiting for their
// children took every one of the node's 4096 delegate call slots, and the
// children's own calls waited for a slot behind them: no grandchild ran, and the
// roots stalled until their calls' 31 minutes passed. Every root ends.
func TestNestedDelegationDoesNotWaitForSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("10 000 sessions")
	}
	const roots = 1030
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead":   {delegateCalls(4, "lead2"), {Content: "done"}},
		"lead2":  {{ToolCalls: []messages.ToolCall{{ID: "g", Name: "gate", Arguments: `{}`}}}, delegateCall("x", "helper", "hi"), {Content: "sub"}},
		"helper": {{Content: "ok"}},
	})
	held := make(chan struct{})
	var gated atomic.Int64
	gate := tools.MustFunc("gate", "Waits.", func(ctx context.Context, _ struct{}) (string, error) {
		gated.Add(1)
		<-held
		return "open", nil
	}, tools.WithConcurrency(1<<14), tools.WithTimeout(10*time.Minute))
	cfg := subagentsConfig(model)
	cfg.Tools = []tools.Tool{tools.Calculator{}, gate}
	cfg.Agents = append(cfg.Agents, node.NamedAgent{Name: "lead2", SystemPrompt: "You delegate too.", Tools: []string{node.DelegateTool, "gate"}})
	n := nodetest.Start(t, cfg)
	for i := range roots {
		if _, err := n.Submit(context.Background(), node.Task{Input: "go", SessionID: fmt.Sprintf("r%d", i), Agent: "lead"}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 120*time.Second, "the sub-agents' first model calls", func() bool { return gated.Load() >= 4096 })
	close(held)
	start := time.Now()
	last, lastChange := -1, time.Now()
	for {
		done := 0
		for i := range roots {
			st, ok, err := n.Status(context.Background(), fmt.Sprintf("r%d", i))
			if err == nil && ok && st.Status != messages.StatusRunning {
				done++
			}
		}
		h := model.callsOf("helper")
		if done == roots {
			t.Logf("all %d roots ended in %s; helper calls %d", roots, time.Since(start), h)
			return
		}
		if h != last {
			last, lastChange = h, time.Now()
		}
		if time.Since(lastChange) > 30*time.Second {
			t.Fatalf("stalled: %d of %d roots ended, helper calls %d (lead2 calls %d), nothing moved for 30 s", done, roots, h, model.callsOf("lead2"))
		}
		time.Sleep(time.Second)
	}
}
