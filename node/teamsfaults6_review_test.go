//go:build review

package node_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// 300 tasks, each with 4 children that spent 100 tokens and wait on their model,
// cancelled at once: each task's figures count its 4 children's spend.
func TestReviewMassCancelKeepsTheChildrensSpend(t *testing.T) {
	const roots = 300
	held := make(chan struct{})
	t.Cleanup(func() { close(held) })
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead": {delegateCalls(4, "helper"), {Content: "done"}},
		"helper": {{ToolCalls: []messages.ToolCall{{ID: "c", Name: "gate", Arguments: `{}`}}, Usage: promptTokens(100)},
			{Content: "2"}},
	})
	var gated atomic.Int64
	gate := tools.MustFunc("gate", "Waits.", func(ctx context.Context, _ struct{}) (string, error) {
		gated.Add(1)
		select {
		case <-held:
		case <-ctx.Done():
		}
		return "open", nil
	}, tools.WithConcurrency(1<<14), tools.WithTimeout(10*time.Minute))
	cfg := subagentsConfig(model)
	cfg.Tools = []tools.Tool{tools.Calculator{}, gate}
	cfg.Agents[1].Tools = []string{"gate"}
	n := nodetest.Start(t, cfg)
	for i := range roots {
		if _, err := n.Submit(context.Background(), node.Task{Input: "go", SessionID: fmt.Sprintf("r%d", i), Agent: "lead"}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 60*time.Second, "every child's second model call", func() bool { return gated.Load() >= 4*roots })
	for i := range roots {
		if err := n.Cancel(context.Background(), fmt.Sprintf("r%d", i), "stop"); err != nil {
			t.Fatal(err)
		}
	}
	counted := func() (int, int) {
		full, tokens := 0, 0
		for i := range roots {
			events := readAll(t, n.Log(), fmt.Sprintf("r%d", i))
			var s actors.SessionState
			for _, e := range events {
				_ = s.Apply(e)
			}
			sub := 0
			for _, c := range payloads[*messages.ToolCallCompleted](t, events) {
				sub += c.Usage.Tokens()
			}
			tokens += sub
			if sub == 400 {
				full++
			}
		}
		return full, tokens
	}
	var full, tokens int
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if full, tokens = counted(); full == roots {
			break
		}
		time.Sleep(time.Second)
	}
	t.Logf("%d of %d tasks count their 4 children's spend; %d of %d tokens", full, roots, tokens, 400*roots)
	if full != roots {
		t.Errorf("%d of %d cancelled tasks miss their children's spend (%d of %d tokens counted)", roots-full, roots, tokens, 400*roots)
	}
}
