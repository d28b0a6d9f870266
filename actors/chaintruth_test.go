package actors_test

import (
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// zeroChain's first step answers {"got":{"n":0,"m":7,"z":null,"list":[0,null,1]}}
// (rec answers what it was given), and its output tests and renders those values.
var zeroChain = tools.Chain{
	Name: "zero_null", Description: "Records a zero and a null, then tells what it got.",
	Steps: []tools.ChainStep{
		{Name: "first", Tool: "rec", Args: `{"n": 0, "m": 7, "z": null, "list": [0, null, 1]}`},
	},
	Output: `{{$g := .steps.first.json.got}}` +
		`if:{{if $g.n}}yes{{else}}no{{end}},{{if $g.m}}yes{{else}}no{{end}}` +
		` not:{{not $g.n}} and:{{if and $g.m $g.n}}yes{{else}}no{{end}} or:{{if or $g.n $g.z}}yes{{else}}no{{end}}` +
		` with:{{with $g.n}}[{{.}}]{{else}}none{{end}}` +
		` null:[{{$g.z}}] list:{{range $g.list}}[{{.}}]{{end}} json:{{json $g.z}}`,
}

// zeroChainRun runs a task recorded under rules whose model calls zeroChain, and
// returns the chain's recorded result; the session verifies.
func zeroChainRun(t *testing.T, rules int) string {
	t.Helper()
	rec := &recorder{}
	chains, err := tools.NewChainTools([]tools.Chain{zeroChain}, []tools.Tool{rec.tool()})
	if err != nil {
		t.Fatal(err)
	}
	var agent actors.Agent
	h := newHarness(t, harnessOpts{model: script(t,
		calls(messages.ToolCall{ID: "c1", Name: "zero_null", Arguments: `{}`}),
		llm.ScriptStep{Content: "done"}),
		tools: []tools.Tool{rec.tool(), chains[0]}, deps: func(d *actors.SessionDeps) {
			d.Agent.Chains = map[string]*tools.ChainTool{zeroChain.Name: chains[0]}
			d.Rules = rules
			agent = d.Agent
		}})
	h.submit("s", "t", "go")
	events := h.wait("s")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("events: %s", types(events))
	}
	var result string
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted {
			if c := decode[*messages.ToolCallCompleted](t, e); c.Tool == zeroChain.Name {
				if c.Error != "" {
					t.Fatalf("the chain failed: %s", c.Error)
				}
				result = c.Result
			}
		}
	}
	verifyDeterministic(t, agent, events)
	return result
}

// From rules 11 a chain's templates take a number of a step's JSON for its value
// (0 is false, in if, with, not, and and or) and render a JSON null empty (and
// as null through json); rules 10 took 0 for true, as any non-empty text, and
// rendered a null "<no value>"; rules 9 read numbers as float64s (0 false) and
// rendered a null so too.
func TestChainTemplatesTakeZeroForFalseAndNullForEmpty(t *testing.T) {
	for rules, want := range map[int]string{
		actors.ContextRules: `if:no,yes not:true and:no or:no with:none null:[] list:[0][][1] json:null`,
		10:                  `if:yes,yes not:false and:yes or:yes with:[0] null:[<no value>] list:[0][<no value>][1] json:null`,
		9:                   `if:no,yes not:true and:no or:no with:none null:[<no value>] list:[0][<no value>][1] json:null`,
	} {
		if got := zeroChainRun(t, rules); got != want {
			t.Errorf("rules %d: the chain answered\n%s\nwant\n%s", rules, got, want)
		}
	}
}
