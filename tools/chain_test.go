package tools_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// echoTool answers its key and arguments.
type echoTool struct{ name string }

func (e echoTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: e.name, Description: "echoes"}
}

func (e echoTool) Call(_ context.Context, c tools.Call) (string, error) {
	return c.Arguments, nil
}

func chainTools(t *testing.T, chains ...tools.Chain) []*tools.ChainTool {
	t.Helper()
	ct, err := tools.NewChainTools(chains, []tools.Tool{tools.Calculator{}, echoTool{"echo"}})
	if err != nil {
		t.Fatal(err)
	}
	return ct
}

func TestChainRendersStepArgumentsFromArgsAndEarlierSteps(t *testing.T) {
	ct := chainTools(t, tools.Chain{
		Name: "area", Description: "Squares a side, then reports it.",
		InputSchema: []byte(`{"type":"object","properties":{"side":{"type":"number"},"unit":{"type":"string"}},"required":["side"]}`),
		Steps: []tools.ChainStep{
			{Name: "square", Tool: "calculator", Args: `{"expression": "{{.args.side}} * {{.args.side}}"}`},
			{Name: "report", Tool: "echo", Args: `{"area": {{.steps.square.output}}, "unit": {{json .args.unit}}, "again": {{json .steps.square.json}}}`},
		},
		Output: `{{(fromjson .steps.report.output).area}} {{.args.unit}}`,
	})[0]
	args, err := ct.ParseArguments(`{"side": 3, "unit": "m2"}`)
	if err != nil {
		t.Fatal(err)
	}
	first, err := ct.StepArguments(0, args, nil)
	if err != nil || first != `{"expression":"3 * 3"}` {
		t.Fatalf("step 1: %q, %v", first, err)
	}
	second, err := ct.StepArguments(1, args, []string{"9"})
	if err != nil || second != `{"area":9,"unit":"m2","again":9}` {
		t.Fatalf("step 2: %q, %v", second, err)
	}
	out, err := ct.Result(args, []string{"9", second})
	if err != nil || out != "9 m2" {
		t.Fatalf("output: %q, %v", out, err)
	}
	// Run as one call, the chain gives the same result.
	got, err := ct.Call(context.Background(), tools.Call{Key: "s/1", Arguments: `{"side": 3, "unit": "m2"}`})
	if err != nil || got != "9 m2" {
		t.Fatalf("Call: %q, %v", got, err)
	}
	if _, err := ct.ParseArguments(`{"unit": "m2"}`); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Fatalf("arguments without the required side: %v", err)
	}
}

func TestChainWithoutOutputAnswersItsLastStep(t *testing.T) {
	ct := chainTools(t, tools.Chain{Name: "one", Description: "Echoes.", Steps: []tools.ChainStep{{Name: "a", Tool: "echo"}}})[0]
	args, _ := ct.ParseArguments("")
	a, err := ct.StepArguments(0, args, nil)
	if err != nil || a != "{}" {
		t.Fatalf("%q, %v", a, err)
	}
	if out, err := ct.Result(args, []string{"last"}); err != nil || out != "last" {
		t.Fatalf("%q, %v", out, err)
	}
}

func TestChainStepArgumentsThatAreNotAnObjectAreAnError(t *testing.T) {
	ct := chainTools(t, tools.Chain{Name: "bad", Description: "Bad.", Steps: []tools.ChainStep{
		{Name: "a", Tool: "echo", Args: `{"q": {{.args.q}}}`}}})[0]
	args, _ := ct.ParseArguments(`{"q": "two words"}`)
	if _, err := ct.StepArguments(0, args, nil); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
		t.Fatalf("want a not-a-JSON-object error, got %v", err)
	}
	if _, err := ct.StepArguments(0, map[string]any{}, nil); err == nil || !strings.Contains(err.Error(), `"q"`) {
		t.Fatalf("want the missing key named, got %v", err)
	}
	_, err := ct.Call(context.Background(), tools.Call{Key: "s/1", Arguments: `{"q": "x y"}`})
	if err == nil || !strings.Contains(err.Error(), `step 1 of 1, "a" (echo)`) {
		t.Fatalf("Call: want the step named, got %v", err)
	}
}

func TestChainValidationErrors(t *testing.T) {
	step := func(name, tool, args string) tools.ChainStep {
		return tools.ChainStep{Name: name, Tool: tool, Args: args}
	}
	for _, tc := range []struct {
		name  string
		chain tools.Chain
		want  string
	}{
		{"no steps", tools.Chain{Name: "c", Description: "d"}, "no steps"},
		{"bad name", tools.Chain{Name: "a chain", Description: "d", Steps: []tools.ChainStep{step("a", "echo", "")}}, "may hold only"},
		{"no description", tools.Chain{Name: "c", Steps: []tools.ChainStep{step("a", "echo", "")}}, "description is empty"},
		{"unknown tool", tools.Chain{Name: "c", Description: "d", Steps: []tools.ChainStep{step("a", "nope", "")}}, `calls the tool "nope", which the agent does not have`},
		{"no tool", tools.Chain{Name: "c", Description: "d", Steps: []tools.ChainStep{step("a", "", "")}}, `step "a": no tool`},
		{"duplicate steps", tools.Chain{Name: "c", Description: "d", Steps: []tools.ChainStep{step("a", "echo", ""), step("a", "echo", "")}}, `two steps are named "a"`},
		{"bad step name", tools.Chain{Name: "c", Description: "d", Steps: []tools.ChainStep{step("1st", "echo", "")}}, "letters, digits and '_'"},
		{"parse error", tools.Chain{Name: "c", Description: "d", Steps: []tools.ChainStep{step("a", "echo", "{{.args.x")}}, `step "a": args:`},
		{"unknown function", tools.Chain{Name: "c", Description: "d", Steps: []tools.ChainStep{step("a", "echo", "{{yaml .args}}")}}, `function "yaml" not defined`},
		{"later step", tools.Chain{Name: "c", Description: "d", Steps: []tools.ChainStep{step("a", "echo", "{{.steps.b.output}}"), step("b", "echo", "")}}, `refers to step "b", which runs after it`},
		{"own step", tools.Chain{Name: "c", Description: "d", Steps: []tools.ChainStep{step("a", "echo", "{{$.steps.a.output}}")}}, `refers to its own step "a"`},
		{"later step by index", tools.Chain{Name: "c", Description: "d", Steps: []tools.ChainStep{step("a", "echo", `{{index .steps "b"}}`), step("b", "echo", "")}}, `refers to step "b", which runs after it`},
		{"unknown step by index", tools.Chain{Name: "c", Description: "d", Steps: []tools.ChainStep{step("a", "echo", "")}, Output: `{{(index $.steps "z").output}}`}, `refers to step "z", which the chain does not have`},
		{"undefined template", tools.Chain{Name: "c", Description: "d", Steps: []tools.ChainStep{step("a", "echo", `{{template "x" .}}`)}}, `calls the template "x", which it does not define`},
		{"later step in a defined template", tools.Chain{Name: "c", Description: "d", Steps: []tools.ChainStep{step("a", "echo", `{{define "x"}}{{.steps.b.output}}{{end}}{{template "x" .}}`), step("b", "echo", "")}}, `refers to step "b", which runs after it`},
		{"unknown step", tools.Chain{Name: "c", Description: "d", Steps: []tools.ChainStep{step("a", "echo", "")}, Output: "{{.steps.z.output}}"}, `refers to step "z", which the chain does not have (its steps: a)`},
		{"schema not an object", tools.Chain{Name: "c", Description: "d", InputSchema: []byte(`{"type":"string"}`), Steps: []tools.ChainStep{step("a", "echo", "")}}, "input_schema"},
		{"step calls a chain", tools.Chain{Name: "c", Description: "d", Steps: []tools.ChainStep{step("a", "inner", "")}}, `calls the chain "inner"`},
		{"named like a tool", tools.Chain{Name: "echo", Description: "d", Steps: []tools.ChainStep{step("a", "calculator", "")}}, "a tool has this name already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner, err := tools.NewChainTools([]tools.Chain{{Name: "inner", Description: "d", Steps: []tools.ChainStep{step("x", "echo", "")}}}, []tools.Tool{echoTool{"echo"}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = tools.NewChainTools([]tools.Chain{tc.chain}, []tools.Tool{tools.Calculator{}, echoTool{"echo"}, inner[0]})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tools.ErrBadChain) {
				t.Fatalf("want an error with %q, got %v", tc.want, err)
			}
		})
	}
	// A reference inside range or with is to the element, not to the chain's steps.
	ok := tools.Chain{Name: "c", Description: "d", Steps: []tools.ChainStep{
		step("a", "echo", `{"n": [{{range $i, $x := .args.xs}}{{if $i}},{{end}}{{json .steps}}{{end}}]}`)}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	// A template the chain defines may be called, and index may name an earlier step.
	defined := tools.Chain{Name: "c", Description: "d", Steps: []tools.ChainStep{step("a", "echo", ""),
		step("b", "echo", `{{define "q"}}{{json .}}{{end}}{"a": {{template "q" (index .steps "a").output}}}`)}}
	if err := defined.Validate(); err != nil {
		t.Fatal(err)
	}
	dup := tools.ValidateChains([]tools.Chain{ok, ok})
	if dup == nil || !strings.Contains(dup.Error(), "two chains have this name") {
		t.Fatalf("two chains named alike: %v", dup)
	}
}

// A chain of two calculator calls, run in one call (a session runs it step by step,
// recording each step).
func ExampleNewChainTools() {
	chains, err := tools.NewChainTools([]tools.Chain{{
		Name:        "twice",
		Description: "Doubles a number twice.",
		InputSchema: []byte(`{"type":"object","properties":{"x":{"type":"number"}},"required":["x"]}`),
		Steps: []tools.ChainStep{
			{Name: "a", Tool: "calculator", Args: `{"expression": "{{.args.x}} * 2"}`},
			{Name: "b", Tool: "calculator", Args: `{"expression": "{{.steps.a.output}} * 2"}`},
		},
		Output: "{{.args.x}} doubled twice is {{.steps.b.output}}",
	}}, []tools.Tool{tools.Calculator{}})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := chains[0].Call(context.Background(), tools.Call{Key: "s/1", Arguments: `{"x": 5}`})
	fmt.Println(out, err)
	// Output: 5 doubled twice is 20 <nil>
}

// stepCatalog owns the names starting "srv__" and offers the tools in it now.
type stepCatalog struct{ offers map[string]tools.Tool }

func (c stepCatalog) Owns(name string) bool { return strings.HasPrefix(name, "srv__") }
func (c stepCatalog) Tool(name string) (tools.Tool, bool) {
	t, ok := c.offers[name]
	return t, ok
}

// A step may call a tool of a catalog by a name the catalog owns, looked up when
// the step runs; a name it does not own is refused when the chain is built.
func TestChainStepCallsACatalogTool(t *testing.T) {
	cat := stepCatalog{offers: map[string]tools.Tool{"srv__echo": echoTool{"srv__echo"}}}
	ch := tools.Chain{Name: "c", Description: "d", Steps: []tools.ChainStep{
		{Name: "a", Tool: "srv__echo", Args: `{"x": 1}`},
		{Name: "b", Tool: "srv__gone", Args: `{}`},
	}}
	if _, err := tools.NewChainTools([]tools.Chain{ch}, nil); !errors.Is(err, tools.ErrBadChain) || !strings.Contains(err.Error(), `"srv__echo", which the agent does not have`) {
		t.Fatalf("without the catalog: %v", err)
	}
	cts, err := tools.NewChainTools([]tools.Chain{ch}, nil, tools.WithStepCatalog(cat))
	if err != nil {
		t.Fatal(err)
	}
	_, err = cts[0].Call(context.Background(), tools.Call{Key: "k"})
	if !errors.Is(err, tools.ErrNotInCatalog) || !strings.Contains(err.Error(), `stopped at step 2 of 2, "b" (srv__gone)`) {
		t.Fatalf("a step whose tool the catalog lacks: %v", err)
	}
	cat.offers["srv__gone"] = echoTool{"srv__gone"}
	if out, err := cts[0].Call(context.Background(), tools.Call{Key: "k"}); err != nil || out != "{}" {
		t.Fatalf("once the catalog offers it: %q, %v", out, err)
	}
	other := tools.Chain{Name: "o", Description: "d", Steps: []tools.ChainStep{{Name: "a", Tool: "sky__echo"}}}
	if _, err := tools.NewChainTools([]tools.Chain{other}, nil, tools.WithStepCatalog(cat)); !errors.Is(err, tools.ErrBadChain) {
		t.Fatalf("a name the catalog does not own: %v", err)
	}
}

func TestParseNamedCall(t *testing.T) {
	for raw, want := range map[string]tools.NamedCall{
		`{"name":"c","arguments":{"x":1}}`:     {Name: "c", Arguments: `{"x":1}`},
		`{"name":"c","arguments":"{\"x\":1}"}`: {Name: "c", Arguments: `{"x":1}`},
		`{"name":"c","arguments":null}`:        {Name: "c"},
		`{"name":"c"}`:                         {Name: "c"},
	} {
		if got, err := tools.ParseNamedCall("call_tool", raw); err != nil || got != want {
			t.Errorf("%s: %+v, %v; want %+v", raw, got, err, want)
		}
	}
	for _, raw := range []string{`{"name":"c","args":{}}`, `{"name":1}`, `{"name":"c"} x`, `[1]`} {
		if _, err := tools.ParseNamedCall("call_tool", raw); !errors.Is(err, tools.ErrInvalidArguments) || !strings.HasPrefix(err.Error(), "call_tool: invalid arguments") {
			t.Errorf("%s: %v", raw, err)
		}
	}
}

// bigTool answers n bytes of text and may give that much: its MaxOutput is limit.
type bigTool struct{ n, limit int }

func (b bigTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "big", Description: "answers a lot"}
}

func (b bigTool) Call(context.Context, tools.Call) (string, error) {
	return strings.Repeat("x", b.n), nil
}

func (b bigTool) Limits() tools.CallLimits { return tools.CallLimits{MaxOutput: b.limit} }

// A chain's result is bounded as a tool's output is: by the largest output limit
// of its steps' tools (at least the default), so a chain that passes a large step's
// result on gives it whole, and one whose output template repeats it is cut with
// the truncation note. A session records the chain's result as Result renders it.
func TestChainResultIsBoundedAsAToolsOutput(t *testing.T) {
	const n, limit = 100 << 10, 256 << 10
	cts, err := tools.NewChainTools([]tools.Chain{
		{Name: "pass", Description: "d", Steps: []tools.ChainStep{{Name: "a", Tool: "big"}}},
		{Name: "repeat", Description: "d", Steps: []tools.ChainStep{{Name: "a", Tool: "big"}},
			Output: "{{.steps.a.output}}{{.steps.a.output}}{{.steps.a.output}}{{.steps.a.output}}"},
		{Name: "echoes", Description: "d", Steps: []tools.ChainStep{{Name: "a", Tool: "echo", Args: `{"s": "0123456789"}`}},
			Output: "{{range .args.n}}{{$.steps.a.output}}{{end}}"},
	}, []tools.Tool{bigTool{n, limit}, echoTool{"echo"}})
	if err != nil {
		t.Fatal(err)
	}
	pass, repeat, echoes := cts[0], cts[1], cts[2]
	big := strings.Repeat("x", n)
	if got := tools.LimitsOf(repeat).MaxOutput; got != limit {
		t.Errorf("the chain's output limit is %d, want its step's %d", got, limit)
	}
	if got := tools.LimitsOf(echoes).MaxOutput; got != tools.DefaultMaxOutput {
		t.Errorf("the chain of echo's output limit is %d, want the default %d", got, tools.DefaultMaxOutput)
	}
	if out, err := pass.Result(nil, []string{big}); err != nil || out != big {
		t.Errorf("passing a %d-byte result on: %d bytes, %v", n, len(out), err)
	}
	out, err := repeat.Result(nil, []string{big})
	if want := fmt.Sprintf("\n[truncated: %d bytes, showing the first %d]", 4*n, limit); err != nil || !strings.HasSuffix(out, want) || len(out) != limit+len(want) {
		t.Errorf("repeating it four times: %d bytes ending %q, %v; want %d bytes ending %q", len(out), out[max(len(out)-60, 0):], err, limit+len(want), want)
	}
	args, err := echoes.ParseArguments(`{"n": 10000}`)
	if err != nil {
		t.Fatal(err)
	}
	step := `{"s":"0123456789"}`
	out, err = echoes.Result(args, []string{step})
	if want := fmt.Sprintf("\n[truncated: %d bytes, showing the first %d]", 10000*len(step), tools.DefaultMaxOutput); err != nil || !strings.HasSuffix(out, want) {
		t.Errorf("an output of 10000 echoes: %d bytes, %v; want it cut to %d with %q", len(out), err, tools.DefaultMaxOutput, want)
	}
}

// waitTool waits until its call's context ends (or a long while) and says which.
type waitTool struct{ timeout time.Duration }

func (w waitTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "wait", Description: "waits"}
}

func (w waitTool) Call(ctx context.Context, _ tools.Call) (string, error) {
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(10 * time.Second):
		return "nobody cut the call short", nil
	}
}

func (w waitTool) Limits() tools.CallLimits { return tools.CallLimits{Timeout: w.timeout} }

// A chain run in one call (node tools call, an MCP client) has the time of all its
// steps, the sum of their timeouts (30 s for a step whose tool sets none), and each
// step has its own tool's: three steps each within their time are not cut short
// together, and a step past its own is.
func TestChainRunInOneCallTimesEachStepByItsTool(t *testing.T) {
	cts, err := tools.NewChainTools([]tools.Chain{{Name: "c", Description: "d", Steps: []tools.ChainStep{
		{Name: "a", Tool: "calculator", Args: `{"expression": "1"}`},
		{Name: "b", Tool: "wait"}}}}, []tools.Tool{tools.Calculator{}, waitTool{time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tools.LimitsOf(cts[0]).Timeout, 30*time.Second+time.Hour; got != want {
		t.Errorf("the chain's timeout is %s, want the sum of its steps' %s", got, want)
	}
	cts, err = tools.NewChainTools([]tools.Chain{{Name: "c", Description: "d", Steps: []tools.ChainStep{
		{Name: "a", Tool: "calculator", Args: `{"expression": "1"}`},
		{Name: "b", Tool: "wait"}}}}, []tools.Tool{tools.Calculator{}, waitTool{20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := cts[0].Call(context.Background(), tools.Call{Key: "k"})
	if want := `chain c stopped at step 2 of 2, "b" (wait): tool timed out after 20ms`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("a step past its tool's timeout: %q, %v; want an error starting %q", out, err, want)
	}
}

// A chain run in one call bounds each step as a session's performer does: a step's
// result past its tool's output bound is cut before the later steps see it, and
// arguments past its argument bound are refused; so the chain answers what it
// answers in a session.
func TestChainRunInOneCallBoundsEachStepAsASession(t *testing.T) {
	const n = 100 << 10
	cts, err := tools.NewChainTools([]tools.Chain{
		{Name: "size", Description: "d", Steps: []tools.ChainStep{{Name: "a", Tool: "big"}}, Output: "{{len .steps.a.output}}"},
	}, []tools.Tool{bigTool{n: n}})
	if err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(len(tools.Truncate(strings.Repeat("x", n), tools.DefaultMaxOutput)))
	if out, err := cts[0].Call(context.Background(), tools.Call{Key: "k"}); err != nil || out != want {
		t.Errorf("the length a later template sees of a %d-byte result: %s, %v; want %s, as in a session", n, out, err, want)
	}
	limited, err := tools.NewChainTools([]tools.Chain{
		{Name: "pass", Description: "d", Steps: []tools.ChainStep{{Name: "a", Tool: "big"}, {Name: "b", Tool: "small", Args: `{"s": {{json .steps.a.output}}}`}}},
	}, []tools.Tool{bigTool{n: n, limit: 1 << 20}, smallArgs{}})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := limited[0].Call(context.Background(), tools.Call{Key: "k"}); err == nil || !errors.Is(err, tools.ErrInvalidArguments) ||
		!strings.Contains(err.Error(), `step 2 of 2, "b" (small): small: invalid arguments: the arguments are`) {
		t.Errorf("a step's arguments past its bound: %.80q, %v", out, err)
	}
}

// smallArgs takes at most 1 KiB of arguments.
type smallArgs struct{}

func (smallArgs) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "small", Description: "small"}
}
func (smallArgs) Call(context.Context, tools.Call) (string, error) { return "ok", nil }
func (smallArgs) Limits() tools.CallLimits                         { return tools.CallLimits{MaxArguments: 1 << 10} }
