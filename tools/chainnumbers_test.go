//go:build review

package tools_test

import (
	"context"
	"testing"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// fixedTool answers every call with out.
type fixedTool struct{ name, out string }

func (f fixedTool) Spec() messages.ToolSpec { return messages.ToolSpec{Name: f.name, Description: "d"} }
func (f fixedTool) Call(context.Context, tools.Call) (string, error) {
	return f.out, nil
}

// A number in a step's JSON result reaches the next step as it was written:
// .steps.NAME.json is parsed into float64s, which text/template prints in
// exponent form (1000000 as 1e+06, the ID 98765432 as 9.8765432e+07) and which
// round an integer past 2^53 (9007199254740993 becomes 9007199254740992) even
// through {{json ...}}. A chain passing an ID or a count from one step to the
// next passes another value. .args keeps its numbers exact (json.Number).
//
// The fix (chainData decoding with UseNumber) changes the arguments a session
// decides for a step (a recorded tool.requested), so it needs a rules version.
func TestChainPassesAStepsNumbersAsWritten(t *testing.T) {
	c := tools.Chain{Name: "c", Description: "d",
		Steps: []tools.ChainStep{
			{Name: "a", Tool: "fixed"},
			{Name: "b", Tool: "echo", Args: `{"id": "{{.steps.a.json.id}}", "n": {{.steps.a.json.n}}, "big": {{json .steps.a.json.big}}}`},
		}}
	byName := map[string]tools.Tool{
		"fixed": fixedTool{"fixed", `{"id": 98765432, "n": 1000000, "big": 9007199254740993}`},
		"echo":  echoTool{"echo"},
	}
	ct, err := tools.NewChainTool(c, func(n string) (tools.Tool, bool) { t, ok := byName[n]; return t, ok })
	if err != nil {
		t.Fatal(err)
	}
	out, err := ct.Call(context.Background(), tools.Call{Key: "k", Arguments: `{}`})
	want := `{"id":"98765432","n":1000000,"big":9007199254740993}`
	if err != nil || out != want {
		t.Fatalf("step b was given %s (%v), want %s", out, err, want)
	}
}
