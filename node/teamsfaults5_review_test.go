//go:build review

package node_test

import (
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A parent with a token budget of 1000 whose one reply delegates 64 calls: each
// child gets a share of 14 tokens (900/64) and makes its one model call all the
// same (a budget stops the calls after the one that reached it), of 500 tokens:
// the tree spends 33x its budget. The README says the shares bound what a tree
// spends.
func TestReviewFanOutOverspendsTheParentsBudget(t *testing.T) {
	wide := delegateCalls(64, "leaf")
	wide.Usage = promptTokens(100)
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead": {wide, {Content: "gathered", Usage: promptTokens(100)}},
		"leaf": {{Content: "ok", Usage: promptTokens(500)}},
	})
	cfg := subagentsConfig(model)
	cfg.Agents = append(cfg.Agents, node.NamedAgent{Name: "leaf", SystemPrompt: "You answer."})
	n := nodetest.Start(t, cfg)
	events := runAgentTask(t, n, node.Task{Input: "fan out", SessionID: "wide", Agent: "lead", MaxTokens: 1000})
	total := 0
	for _, e := range payloads[*messages.ModelResponded](t, events) {
		total += e.Usage.Tokens()
	}
	sub := 0
	for _, c := range payloads[*messages.ToolCallCompleted](t, events) {
		sub += c.Usage.Tokens()
	}
	last := events[len(events)-1]
	t.Logf("parent: own %d tokens, sub-agents %d, budget 1000; ended %s %s", total, sub, last.Type, last.Payload)
	if total+sub > 2*1000 {
		t.Errorf("the tree spent %d tokens on a budget of 1000", total+sub)
	}
}
