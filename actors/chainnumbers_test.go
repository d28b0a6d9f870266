package actors_test

import (
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// idChain passes the ID its first step answered to its second step: rec answers
// {"got":{"id":98765432}}, and the second step is given .steps.first.json.got.id.
var idChain = tools.Chain{
	Name: "pass_id", Description: "Records an ID, then records what the first step answered.",
	Steps: []tools.ChainStep{
		{Name: "first", Tool: "rec", Args: `{"id": {{.args.id}}}`},
		{Name: "second", Tool: "rec", Args: `{"prev": {{.steps.first.json.got.id}}, "as_text": "{{.steps.first.json.got.id}}", "price": {{.args.price}}}`},
	},
	Output: `{{.steps.first.json.got.id}}`,
}

// chainNumbersRun runs a task recorded under rules whose model calls idChain with
// the ID 98765432 and the price 1234567.5, and returns the second step's recorded arguments and the
// chain's recorded result; the session verifies.
func chainNumbersRun(t *testing.T, rules int) (args, result string) {
	t.Helper()
	rec := &recorder{}
	chains, err := tools.NewChainTools([]tools.Chain{idChain}, []tools.Tool{rec.tool()})
	if err != nil {
		t.Fatal(err)
	}
	var agent actors.Agent
	h := newHarness(t, harnessOpts{model: script(t,
		calls(messages.ToolCall{ID: "c1", Name: "pass_id", Arguments: `{"id": 98765432, "price": 1234567.5}`}),
		llm.ScriptStep{Content: "done"}),
		tools: []tools.Tool{rec.tool(), chains[0]}, deps: func(d *actors.SessionDeps) {
			d.Agent.Chains = map[string]*tools.ChainTool{idChain.Name: chains[0]}
			d.Rules = rules // the node pinned to them: its new tasks are recorded under them
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
			if r := decode[*messages.ToolCallRequested](t, e); r.ChainStep == "second" {
				args = r.Arguments
			}
		case messages.TypeToolCallCompleted:
			if c := decode[*messages.ToolCallCompleted](t, e); c.Tool == idChain.Name {
				result = c.Result
			}
		}
	}
	verifyDeterministic(t, agent, events)
	return args, result
}

// Under rules 10 a chain passes the ID a step answered to the next step, and to
// its result, as it was written, and its argument with a fraction as well.
// Rules 11 (NumbersAsValues) reads them as written too.
func TestChainPassesAStepsNumbersAsWrittenUnderRules10(t *testing.T) {
	for _, rules := range []int{10, actors.ContextRules} {
		args, result := chainNumbersRun(t, rules)
		if want := `{"prev":98765432,"as_text":"98765432","price":1234567.5}`; args != want {
			t.Errorf("rules %d: the second step was given %s, want %s", rules, args, want)
		}
		if result != "98765432" {
			t.Errorf("rules %d: the chain answered %q, want 98765432", rules, result)
		}
	}
}

// Under rules 9 the same chain renders the numbers of a step's result as float64s,
// as the builds of rules 9 recorded them: a recorded task is decided alike.
func TestChainRendersAStepsNumbersAsFloatsUnderRules9(t *testing.T) {
	args, result := chainNumbersRun(t, 9)
	if want := `{"prev":9.8765432e+07,"as_text":"9.8765432e+07","price":1.2345675e+06}`; args != want {
		t.Errorf("the second step was given %s, want %s", args, want)
	}
	if result != "9.8765432e+07" {
		t.Errorf("the chain answered %q, want 9.8765432e+07", result)
	}
}
