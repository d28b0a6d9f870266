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

// numbersChain is a chain whose second step is given the numbers of the first
// step's JSON result, of fromjson's and of its own arguments, and whose output
// repeats them.
func numbersChain(t *testing.T) *tools.ChainTool {
	t.Helper()
	const b = `{"id": "{{.steps.a.json.id}}", "n": {{.steps.a.json.n}}, "big": {{json .steps.a.json.big}}, ` +
		`"from": {{(fromjson .steps.a.output).n}}, "arg": {{.args.n}}, "argbig": {{json .args.big}}, "argf": "{{.args.f}}", "fs": {{json .args.fs}}}`
	c := tools.Chain{Name: "c", Description: "d",
		Steps: []tools.ChainStep{
			{Name: "a", Tool: "fixed"},
			{Name: "b", Tool: "echo", Args: b},
		},
		Output: `{{.steps.a.json.id}} {{(fromjson .steps.a.output).big}} {{.steps.b.output}}`}
	byName := map[string]tools.Tool{
		"fixed": fixedTool{"fixed", `{"id": 98765432, "n": 1000000, "big": 9007199254740993}`},
		"echo":  echoTool{"echo"},
	}
	ct, err := tools.NewChainTool(c, func(n string) (tools.Tool, bool) { t, ok := byName[n]; return t, ok })
	if err != nil {
		t.Fatal(err)
	}
	return ct
}

const numbersArgs = `{"n": 1000000, "big": 9007199254740993, "f": 1234567.5, "fs": [0.5, {"x": 25000000.25}]}`

// A number in a step's JSON result reaches the next step as it was written: not
// parsed into a float64, which text/template prints in exponent form (1000000 as
// 1e+06, the ID 98765432 as 9.8765432e+07) and which rounds an integer past 2^53
// (9007199254740993 becomes 9007199254740992) even through {{json ...}}; fromjson
// likewise, and .args (whose numbers with a fraction the arguments' parser reads
// as float64s: 1234567.5 rendered 1.2345675e+06).
func TestChainPassesAStepsNumbersAsWritten(t *testing.T) {
	ct := numbersChain(t)
	out, err := ct.Call(context.Background(), tools.Call{Key: "k", Arguments: numbersArgs})
	wantB := `{"id":"98765432","n":1000000,"big":9007199254740993,"from":1000000,"arg":1000000,"argbig":9007199254740993,"argf":"1234567.5","fs":[0.5,{"x":25000000.25}]}`
	if want := "98765432 9007199254740993 " + wantB; err != nil || out != want {
		t.Fatalf("the chain answered %s (%v), want %s", out, err, want)
	}
	// A session's step by step rendering is the same.
	args, err := ct.ParseArguments(numbersArgs)
	if err != nil {
		t.Fatal(err)
	}
	outputs := []string{`{"id": 98765432, "n": 1000000, "big": 9007199254740993}`}
	if got, err := ct.StepArguments(1, args, outputs); err != nil || got != wantB {
		t.Fatalf("step b's arguments: %s (%v), want %s", got, err, wantB)
	}
}

// A task recorded under decision rules 9 or older renders its steps as those
// builds did (NumbersAsFloats): the numbers of a step's result and fromjson's as
// float64s, so that its recorded steps' arguments are decided again alike.
func TestChainNumbersAsFloatsRenderAsBefore(t *testing.T) {
	ct := numbersChain(t)
	old := ct.WithNumbers(tools.NumbersAsFloats)
	args, err := old.ParseArguments(numbersArgs)
	if err != nil {
		t.Fatal(err)
	}
	outputs := []string{`{"id": 98765432, "n": 1000000, "big": 9007199254740993}`}
	got, err := old.StepArguments(1, args, outputs)
	want := `{"id":"9.8765432e+07","n":1e+06,"big":9007199254740992,"from":1e+06,"arg":1000000,"argbig":9007199254740993,"argf":"1.2345675e+06","fs":[0.5,{"x":25000000.25}]}`
	if err != nil || got != want {
		t.Fatalf("step b's arguments as floats: %s (%v), want %s", got, err, want)
	}
	res, err := old.Result(args, append(outputs, got))
	if want := "9.8765432e+07 9.007199254740992e+15 " + want; err != nil || res != want {
		t.Fatalf("the result as floats: %s (%v), want %s", res, err, want)
	}
	// The chain it was made from is not changed, nor are the arguments.
	if got, err := ct.StepArguments(1, args, outputs); err != nil || got == want {
		t.Fatalf("the chain renders %s (%v) after WithNumbers", got, err)
	}
	if got, err := old.StepArguments(1, args, outputs); err != nil || got != want {
		t.Fatalf("step b's arguments as floats, again: %s (%v), want %s", got, err, want)
	}
}

// fromjson refuses what is not one JSON value with json.Unmarshal's words, and a
// step's result that is not reads as no JSON, whatever the numbers.
func TestChainFromJSONRefusesTrailingText(t *testing.T) {
	c := tools.Chain{Name: "c", Description: "d",
		Steps: []tools.ChainStep{
			{Name: "a", Tool: "fixed"},
			{Name: "b", Tool: "echo", Args: `{"json": {{json .steps.a.json}}, "x": {{json (fromjson .steps.a.output)}}}`},
		}}
	byName := map[string]tools.Tool{"fixed": fixedTool{"fixed", `{"n": 1} {"n": 2}`}, "echo": echoTool{"echo"}}
	ct, err := tools.NewChainTool(c, func(n string) (tools.Tool, bool) { t, ok := byName[n]; return t, ok })
	if err != nil {
		t.Fatal(err)
	}
	for _, numbers := range []tools.ChainNumbers{tools.NumbersAsWritten, tools.NumbersAsFloats} {
		_, err := ct.WithNumbers(numbers).StepArguments(1, map[string]any{}, []string{`{"n": 1} {"n": 2}`})
		const want = `rendering its args: at <fromjson .steps.a.output>: error calling fromjson: invalid character '{' after top-level value`
		if err == nil || err.Error() != want {
			t.Errorf("numbers %d: %v, want %s", numbers, err, want)
		}
	}
}
