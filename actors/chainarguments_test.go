package actors_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// chainArgumentsRun runs a task recorded under rules whose model calls chain with
// arguments, and returns its only step's recorded arguments and the chain's
// recorded error; the session verifies.
func chainArgumentsRun(t *testing.T, rules int, chain tools.Chain, arguments string) (stepArgs, chainErr string) {
	t.Helper()
	rec := &recorder{}
	chains, err := tools.NewChainTools([]tools.Chain{chain}, []tools.Tool{rec.tool()})
	if err != nil {
		t.Fatal(err)
	}
	var agent actors.Agent
	h := newHarness(t, harnessOpts{model: script(t,
		calls(messages.ToolCall{ID: "c1", Name: chain.Name, Arguments: arguments}),
		llm.ScriptStep{Content: "done"}),
		tools: []tools.Tool{rec.tool(), chains[0]}, deps: func(d *actors.SessionDeps) {
			d.Agent.Chains = map[string]*tools.ChainTool{chain.Name: chains[0]}
			d.Rules = rules
			agent = d.Agent
		}})
	h.submit("s", "t", "go")
	events := h.wait("s")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("events: %s", types(events))
	}
	if task := decode[*messages.TaskSubmitted](t, events[0]); task.Rules != rules {
		t.Fatalf("the task was recorded under rules %d, want %d", task.Rules, rules)
	}
	for _, e := range events {
		switch e.Type {
		case messages.TypeToolCallRequested:
			if r := decode[*messages.ToolCallRequested](t, e); r.ChainStep != "" {
				stepArgs = r.Arguments
			}
		case messages.TypeToolCallCompleted:
			if c := decode[*messages.ToolCallCompleted](t, e); c.Tool == chain.Name {
				chainErr = c.Error
			}
		}
	}
	verifyDeterministic(t, agent, events)
	return stepArgs, chainErr
}

var bigIDChain = tools.Chain{
	Name: "big_id", Description: "Records an ID.",
	InputSchema: []byte(`{"type":"object","properties":{"id":{"type":"integer"}}}`),
	Steps:       []tools.ChainStep{{Name: "only", Tool: "rec", Args: `{"id": {{.args.id}}}`}},
}

var defsItemChain = tools.Chain{
	Name: "defs_item", Description: "Records an item.",
	InputSchema: []byte(`{"type":"object","$defs":{"Item":{"type":"object","properties":{"qty":{"type":"integer"}}}},` +
		`"properties":{"item":{"$ref":"#/$defs/Item"}}}`),
	Steps: []tools.ChainStep{{Name: "only", Tool: "rec", Args: `{"qty": {{.args.item.qty}}}`}},
}

// Under rules 12 a chain's integer argument float64 does not hold as written is
// rounded, and a value under a $ref is not coerced, as the builds of rules 12
// decided, and the sessions they recorded verify: the chain's argument check is
// decided again when a session is refolded or verified.
func TestChainArgumentsAreReadAsUnderRules12(t *testing.T) {
	if args, errMsg := chainArgumentsRun(t, 12, bigIDChain, `{"id": 10000000000000000001}`); args != `{"id":10000000000000000000}` || errMsg != "" {
		t.Errorf("big id: step given %q, chain error %q; want the rounded id and no error", args, errMsg)
	}
	if args, errMsg := chainArgumentsRun(t, 12, defsItemChain, `{"item":{"qty":"2"}}`); args != "" || !strings.Contains(errMsg, "Item") {
		t.Errorf("$defs item: step given %q, chain error %q; want no step and the validator's error naming Item", args, errMsg)
	}
}

// From rules 13 the same chain refuses the integer it cannot pass on exactly and
// coerces the value under the $ref.
func TestChainArgumentsAreReadExactlyFromRules13(t *testing.T) {
	if args, errMsg := chainArgumentsRun(t, actors.ContextRules, bigIDChain, `{"id": 10000000000000000001}`); args != "" || !strings.Contains(errMsg, "10000000000000000001") {
		t.Errorf("big id: step given %q, chain error %q; want no step and an error naming the integer", args, errMsg)
	}
	if args, errMsg := chainArgumentsRun(t, actors.ContextRules, defsItemChain, `{"item":{"qty":"2"}}`); args != `{"qty":2}` || errMsg != "" {
		t.Errorf("$defs item: step given %q, chain error %q; want qty 2", args, errMsg)
	}
}
