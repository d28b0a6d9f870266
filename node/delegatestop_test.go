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
)

func testDelegateStopMidFanOut(t *testing.T, deadline bool) {
	held := make(chan struct{})
	t.Cleanup(func() { close(held) })
	var open atomic.Int64
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead":   {delegateCalls(8, "lead2"), {Content: "gathered"}},
		"lead2":  {delegateCalls(2, "helper"), {Content: "sub-gathered"}},
		"helper": {{Content: "ok"}},
	})
	model.hold = func(agent string, _ int) <-chan struct{} {
		if agent == "helper" {
			open.Add(1)
			ch := make(chan struct{})
			go func() { <-held; close(ch) }()
			return ch
		}
		return nil
	}
	wrapped := &ctxCounting{byAgent: model, open: &open}
	cfg := subagentsConfig(wrapped)
	cfg.Agents = append(cfg.Agents, node.NamedAgent{Name: "lead2", SystemPrompt: "You delegate too.", Tools: []string{node.DelegateTool}})
	n := nodetest.Start(t, cfg)
	task := node.Task{Input: "go", SessionID: "root", Agent: "lead"}
	if deadline {
		task.DeadlineMS = 1500
	}
	if _, err := n.Submit(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "grandchildren's model calls", func() bool { return model.callsOf("helper") >= 4 })
	if !deadline {
		if err := n.Cancel(context.Background(), "root", "stop"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, "every held model call to end", func() bool { return wrapped.returned.Load() >= int64(model.callsOf("helper")) })
	time.Sleep(500 * time.Millisecond)
	running := 0
	sessions := 0
	for i := 4; i < 20; i++ {
		for j := 0; j < 20; j++ {
			for _, id := range []string{fmt.Sprintf("root.sub%d", i), fmt.Sprintf("root.sub%d.sub%d", i, j)} {
				if j > 0 && id == fmt.Sprintf("root.sub%d", i) {
					continue
				}
				st, ok, err := n.Status(context.Background(), id)
				if err != nil || !ok {
					continue
				}
				sessions++
				if st.Status == messages.StatusRunning {
					running++
					t.Errorf("%s still running", id)
				}
			}
		}
	}
	t.Logf("sessions %d, running %d, helper calls %d returned %d", sessions, running, model.callsOf("helper"), wrapped.returned.Load())
	st, _, _ := n.Status(context.Background(), "root")
	t.Logf("root: %+v", st.Status)
}

type ctxCounting struct {
	*byAgent
	open     *atomic.Int64
	returned atomic.Int64
}

func (c *ctxCounting) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	resp, err := c.byAgent.Generate(ctx, r)
	if r.Scope.Agent == "helper" {
		c.returned.Add(1)
	}
	return resp, err
}

func TestDelegateCancelMidNestedFanOut(t *testing.T)   { testDelegateStopMidFanOut(t, false) }
func TestDelegateDeadlineMidNestedFanOut(t *testing.T) { testDelegateStopMidFanOut(t, true) }
