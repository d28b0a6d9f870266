package tools_test

import (
	"context"
	"strings"
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

// A template written for the numbers of rules 9 and older (float64s) compares and
// formats the json.Numbers of rules 10 alike: gt, eq, lt against a literal, an
// argument or another step's number, and printf's %d and %.2f, where text/template
// refused to compare a json.Number with a number ("incompatible types for
// comparison") and printf wrote %!d(json.Number=3). Against a string a number
// still compares as text, and integers past 2^53 exactly.
func TestChainComparesAndFormatsNumbersAsNumbers(t *testing.T) {
	const out = `{"n": 3, "zero": 0, "price": 12.5, "big": 9007199254740993, "same": 9007199254740992, "s": "x"}`
	cases := []struct{ tmpl, want string }{
		{`{{if gt .steps.a.json.n 0}}pos{{else}}neg{{end}}`, "pos"},
		{`{{if gt .steps.a.json.n 0.0}}pos{{end}}`, "pos"},
		{`{{if eq .steps.a.json.n 3}}three{{end}}`, "three"},
		{`{{if eq .steps.a.json.n 1 2 3}}one of{{end}}`, "one of"},
		{`{{if eq .steps.a.json.zero 0}}zero{{end}}`, "zero"},
		{`{{if ne .steps.a.json.zero 0}}nonzero{{else}}zero{{end}}`, "zero"},
		{`{{if lt .steps.a.json.price 12.75}}cheap{{end}}`, "cheap"},
		{`{{if le .steps.a.json.price 12.5}}le{{end}}`, "le"},
		{`{{if ge .steps.a.json.n .args.min}}enough{{end}}`, "enough"},
		{`{{if gt .steps.a.json.big .steps.a.json.same}}exact{{end}}`, "exact"},
		{`{{if eq .steps.a.json.n "3"}}text{{end}}`, "text"},
		{`{{if eq .steps.a.json.s "x"}}s{{end}}`, "s"},
		{`{{printf "%d items at %.2f" .steps.a.json.n .steps.a.json.price}}`, "3 items at 12.50"},
		{`{{printf "%v %s %d" .steps.a.json.big .steps.a.json.big .steps.a.json.big}}`, "9007199254740993 9007199254740993 9007199254740993"},
		{`{{printf "%05.1f|%x" .steps.a.json.price .steps.a.json.n}}`, "012.5|3"},
		{`{{if eq .args.min 2}}int{{end}}`, "int"},
	}
	for _, c := range cases {
		ch := tools.Chain{Name: "c", Description: "d",
			Steps:  []tools.ChainStep{{Name: "a", Tool: "fixed"}},
			Output: c.tmpl}
		byName := map[string]tools.Tool{"fixed": fixedTool{"fixed", out}}
		ct, err := tools.NewChainTool(ch, func(n string) (tools.Tool, bool) { t, ok := byName[n]; return t, ok })
		if err != nil {
			t.Fatal(err)
		}
		got, err := ct.Call(context.Background(), tools.Call{Key: "k", Arguments: `{"min": 2}`})
		if err != nil || got != c.want {
			t.Errorf("%s rendered %q (%v), want %q", c.tmpl, got, err, c.want)
		}
	}
}

// What text/template refuses to compare it still refuses, with its words, and a
// number past a float64's range is an error, not a silent infinity.
func TestChainComparisonErrors(t *testing.T) {
	cases := []struct{ out, tmpl, want string }{
		{`{"n": 3}`, `{{if lt .steps.a.json.n "4"}}x{{end}}`, ""}, // text against text: allowed, as before
		{`{"n": 3}`, `{{if lt .steps.a.json.n true}}x{{end}}`, "incompatible types for comparison"},
		{`{"n": 1e400}`, `{{if gt .steps.a.json.n 0.5}}x{{end}}`, "past a float64's range"},
		{`{"l": [1]}`, `{{if lt .steps.a.json.l 2}}x{{end}}`, "invalid type for comparison"},
	}
	for _, c := range cases {
		ch := tools.Chain{Name: "c", Description: "d",
			Steps:  []tools.ChainStep{{Name: "a", Tool: "fixed"}},
			Output: c.tmpl}
		byName := map[string]tools.Tool{"fixed": fixedTool{"fixed", c.out}}
		ct, err := tools.NewChainTool(ch, func(n string) (tools.Tool, bool) { t, ok := byName[n]; return t, ok })
		if err != nil {
			t.Fatal(err)
		}
		_, err = ct.Call(context.Background(), tools.Call{Key: "k", Arguments: `{}`})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s on %s: %v", c.tmpl, c.out, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s on %s: %v, want an error saying %q", c.tmpl, c.out, err, c.want)
		}
	}
}
