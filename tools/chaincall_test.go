package tools_test

import (
	"context"
	"testing"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// callerTool answers the fields of the call it is given other than its arguments.
type callerTool struct{}

func (callerTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "caller", Description: "answers who calls"}
}

func (callerTool) Call(_ context.Context, c tools.Call) (string, error) {
	return c.Agent + " " + c.Key + " " + c.Outward, nil
}

// A chain run in one call calls each step for the agent of its call, with the
// step's own key and outward name.
func TestChainCallsItsStepsForTheAgentOfItsCall(t *testing.T) {
	ct, err := tools.NewChainTools([]tools.Chain{{Name: "who", Description: "d",
		Steps:  []tools.ChainStep{{Name: "a", Tool: "caller"}, {Name: "b", Tool: "caller"}},
		Output: "{{.steps.a.output}}; {{.steps.b.output}}"}}, []tools.Tool{callerTool{}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := ct[0].Call(context.Background(), tools.Call{Key: "s/4", Arguments: "{}", Agent: "writer", Outward: "o"})
	if want := "writer s/4#a o#a; writer s/4#b o#b"; err != nil || out != want {
		t.Fatalf("Call = %q, %v; want %q", out, err, want)
	}
}
