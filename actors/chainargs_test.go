package actors_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// A model calls a chain that declares no input schema with arguments a session
// refuses (numbers too large, inside an object): the session decides the refusal,
// so replay verify must decide the same words every time.
func TestChainRefusalOfBadArgumentsVerifies(t *testing.T) {
	rec := &recorder{}
	anyArgs := tools.Chain{Name: "any_args", Description: "Records its arguments.",
		Steps: []tools.ChainStep{{Name: "only", Tool: "rec", Args: `{"x": "y"}`}}}
	chains, err := tools.NewChainTools([]tools.Chain{anyArgs}, []tools.Tool{rec.tool()})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(`{"o":{`)
	for i := range 12 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"k%02d":1e999`, i)
	}
	b.WriteString(`}}`)
	var agent actors.Agent
	h := newHarness(t, harnessOpts{model: script(t,
		calls(messages.ToolCall{ID: "c1", Name: "any_args", Arguments: b.String()}),
		llm.ScriptStep{Content: "gave up"}),
		tools: []tools.Tool{rec.tool(), chains[0]}, maxSteps: 5, deps: func(d *actors.SessionDeps) {
			d.Agent.Chains = map[string]*tools.ChainTool{anyArgs.Name: chains[0]}
			agent = d.Agent
		}})
	h.submit("s1", "task-1", "go")
	events := h.wait("s1")
	if events[len(events)-1].Type != messages.TypeTaskCompleted {
		t.Fatalf("events: %s", types(events))
	}
	for range 20 {
		verifyDeterministic(t, agent, events)
	}
}
