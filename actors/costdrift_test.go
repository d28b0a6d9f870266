package actors_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// A cost budget is reached when the calls' costs add up to it: ten calls of $0.10
// (1,000 prompt tokens at $100 per million, as the gateway prices them) reach a
// budget of $1. The costs are float64 dollars summed call by call, and ten 0.1s
// make 0.9999999999999999 < 1: the budget lets an eleventh call through. With
// 10,000 calls of $0.0001 it is the same (0.99999999999990619). From decision
// rules 10 the budget is reached within a billionth of it; a task recorded under
// rules 9 is decided as it was, the eleventh call made.
func TestCostBudgetIsReachedByCallsThatAddUpToIt(t *testing.T) {
	for _, c := range []struct{ rules, steps int }{{actors.ContextRules, 10}, {9, 11}} {
		t.Run(fmt.Sprintf("rules %d", c.rules), func(t *testing.T) { costBudgetOfTenCalls(t, c.rules, c.steps) })
	}
}

func costBudgetOfTenCalls(t *testing.T, rules, wantSteps int) {
	echo := funcTool{"echo", func(_ context.Context, c tools.Call) (string, error) { return c.Arguments, nil }}
	var steps []llm.ScriptStep
	for n := range 12 {
		steps = append(steps, llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: fmt.Sprint(n), Name: "echo", Arguments: fmt.Sprintf(`{"n":%d}`, n)}},
			Usage: messages.Usage{PromptTokens: 1000, CostUSD: 1000 * 100.0 / 1e6}})
	}
	h := newHarness(t, harnessOpts{tools: []tools.Tool{echo}, model: script(t, steps...),
		deps: func(d *actors.SessionDeps) { d.Agent.MaxCostUSD, d.Agent.MaxSteps, d.Rules = 1, 100, rules }})
	h.submit("s", "t", "go")
	f := failure(t, h.wait("s"))
	if f.Reason != messages.ReasonCostBudget || f.Steps != wantSteps {
		t.Fatalf("ten calls of $0.10 under a budget of $1: stopped after %d steps (%s, cost %.17g); want %d", f.Steps, f.Reason, f.Usage.CostUSD, wantSteps)
	}
}
