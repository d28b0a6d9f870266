package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

type fetchArgs struct {
	URL    string   `json:"url" jsonschema:"the URL to fetch"`
	Method string   `json:"method,omitempty" jsonschema:"GET or HEAD" tool:"enum=GET|HEAD"`
	Tries  int      `json:"tries,omitempty" tool:"minimum=1,maximum=5,default=1"`
	Tags   []string `json:"tags,omitempty" tool:"enum=a|b,maxItems=2"`
}

type fetchResult struct {
	Status int    `json:"status"`
	Body   string `json:"body"`
}

func call(t *testing.T, tool tools.Tool, args string) (string, error) {
	t.Helper()
	return tool.Call(context.Background(), tools.Call{Key: "k", Arguments: args})
}

func TestFuncDerivesItsSchemaFromTheArgumentType(t *testing.T) {
	var got fetchArgs
	tool, err := tools.Func("fetch", " Fetches a URL. ", func(_ context.Context, a fetchArgs) (fetchResult, error) {
		got = a
		return fetchResult{Status: 200, Body: "<b>ok</b>"}, nil
	}, tools.WithSideEffects(false), tools.WithTimeout(time.Second), tools.WithMaxOutput(100))
	if err != nil {
		t.Fatal(err)
	}
	spec := tool.Spec()
	want := `{"type":"object","properties":{"url":{"type":"string","description":"the URL to fetch"},` +
		`"method":{"type":"string","description":"GET or HEAD","enum":["GET","HEAD"]},` +
		`"tries":{"type":"integer","default":1,"minimum":1,"maximum":5},` +
		`"tags":{"type":"array","items":{"type":"string","enum":["a","b"]},"maxItems":2}},` +
		`"required":["url"],"additionalProperties":false}`
	if spec.Name != "fetch" || spec.Description != "Fetches a URL." || string(spec.Parameters) != want {
		t.Fatalf("spec = %s %q\n%s\nwant\n%s", spec.Name, spec.Description, spec.Parameters, want)
	}
	out, err := call(t, tool, `url=https://example.com, tags=["b"]`)
	if err != nil {
		t.Fatal(err)
	}
	if out != `{"status":200,"body":"<b>ok</b>"}` {
		t.Fatalf("result %s", out)
	}
	if got.URL != "https://example.com" || got.Tries != 1 || len(got.Tags) != 1 || got.Tags[0] != "b" {
		t.Fatalf("the function got %+v (the default of tries should apply)", got)
	}
	if l := tools.LimitsOf(tool); l.Timeout != time.Second || l.MaxOutput != 100 || l.MaxArguments != tools.DefaultMaxArguments {
		t.Fatalf("limits %+v", l)
	}
	if tools.HasSideEffects(tool) || tools.SourceOf(tool) != "builtin" {
		t.Fatal("side effects or source")
	}
	_, err = call(t, tool, `{"url":"x","method":"POST","tags":["a","c"]}`)
	if !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), `"method" must be one of "GET", "HEAD", not "POST"`) ||
		!strings.Contains(err.Error(), `"tags[1]" must be one of "a", "b", not "c"`) {
		t.Fatalf("error %v", err)
	}
}

func TestFuncResultsAndErrors(t *testing.T) {
	type none struct{}
	text := tools.MustFunc("text", "d", func(context.Context, none) (string, error) { return "plain <text>", nil })
	raw := tools.MustFunc("raw", "d", func(context.Context, none) (json.RawMessage, error) { return json.RawMessage("{ \"a\" : 1 }"), nil })
	ptr := tools.MustFunc("ptr", "d", func(context.Context, none) (*fetchResult, error) { return nil, nil })
	boom := errors.New("boom")
	fails := tools.MustFunc("fails", "d", func(context.Context, none) (int, error) { return 0, boom })
	for tool, want := range map[tools.Tool]string{text: "plain <text>", raw: `{"a":1}`, ptr: "null"} {
		if out, err := call(t, tool, ""); err != nil || out != want {
			t.Errorf("%s: %q, %v; want %q", tool.Spec().Name, out, err, want)
		}
	}
	if _, err := call(t, fails, "{}"); !errors.Is(err, boom) {
		t.Errorf("fails: %v", err)
	}
	if _, err := call(t, text, `{"x":1}`); !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), `unknown field "x" (it has none)`) {
		t.Errorf("extra field on a tool without arguments: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := text.Call(ctx, tools.Call{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestFuncSchemaCanBeGivenOrEditedByHand(t *testing.T) {
	type args struct {
		N int `json:"n"`
	}
	double := func(_ context.Context, a args) (int, error) { return 2 * a.N, nil }
	given := tools.MustFunc("double", "d", double, tools.WithSchema(json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","multipleOf":3}},"required":["n"]}`)))
	if out, err := call(t, given, `{"n":"9"}`); err != nil || out != "18" {
		t.Fatalf("given schema: %q, %v", out, err)
	}
	if _, err := call(t, given, `{"n":4}`); err == nil || !strings.Contains(err.Error(), `"n" does not match the schema: multipleOf`) {
		t.Fatalf("given schema: %v", err)
	}
	edited := tools.MustFunc("double", "d", double, tools.WithSchemaFunc(func(s *jsonschema.Schema) {
		s.Properties["n"].Description = "a number to double"
	}))
	if p := string(edited.Spec().Parameters); !strings.Contains(p, `"description":"a number to double"`) {
		t.Fatalf("edited schema: %s", p)
	}
}

func TestFuncRefusesWhatCannotBeATool(t *testing.T) {
	f := func(context.Context, string) (string, error) { return "", nil }
	if _, err := tools.Func("s", "d", f); err == nil || !strings.Contains(err.Error(), `want a struct or a map`) {
		t.Errorf("string arguments: %v", err)
	}
	type bad struct {
		N int `json:"n" tool:"minimum=x"`
	}
	if _, err := tools.Func("b", "d", func(context.Context, bad) (string, error) { return "", nil }); err == nil || !strings.Contains(err.Error(), `minimum="x" is not a number`) {
		t.Errorf("bad tag: %v", err)
	}
	type unknown struct {
		N int `json:"n" tool:"maximun=3"`
	}
	if _, err := tools.Func("u", "d", func(context.Context, unknown) (string, error) { return "", nil }); err == nil || !strings.Contains(err.Error(), `unknown keyword "maximun"`) {
		t.Errorf("unknown keyword: %v", err)
	}
	if _, err := tools.Func("has space", "d", func(context.Context, struct{}) (string, error) { return "", nil }); err == nil {
		t.Error("a bad name was accepted")
	}
}

// noteBook is a toolbox's receiver: its methods are the operations.
type noteBook struct{ notes []string }

type addArgs struct {
	Body string `json:"body" tool:"minLength=1"`
}

type findArgs struct {
	Query string `json:"query"`
	Limit int    `json:"limit,omitempty" tool:"minimum=1"`
}

func (n *noteBook) Add(_ context.Context, a addArgs) (string, error) {
	n.notes = append(n.notes, a.Body)
	return "added", nil
}

func (n *noteBook) Find(_ context.Context, a findArgs) ([]string, error) {
	var out []string
	for _, b := range n.notes {
		if strings.Contains(b, a.Query) && (a.Limit == 0 || len(out) < a.Limit) {
			out = append(out, b)
		}
	}
	return out, nil
}

func TestToolboxCollapsedAndExpanded(t *testing.T) {
	nb := &noteBook{}
	box, err := tools.NewToolbox("notes", "Your notes.",
		tools.Sub("add", "Adds a note.", nb.Add),
		tools.Sub("find", "Finds notes.", nb.Find, tools.WithSideEffects(false), tools.WithTimeout(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	spec := box.Spec()
	if !strings.Contains(spec.Description, `- add: Adds a note. args: {"type":"object","properties":{"body":{"type":"string","minLength":1}}`) ||
		!strings.Contains(string(spec.Parameters), `"op":{"type":"string","description":"the operation","enum":["add","find"]}`) {
		t.Fatalf("collapsed spec:\n%s\n%s", spec.Description, spec.Parameters)
	}
	if out, err := call(t, box, `{"op":"add","args":{"body":"buy milk"}}`); err != nil || out != "added" {
		t.Fatalf("add: %q %v", out, err)
	}
	if out, err := call(t, box, `op=find, args={"query":"milk","limit":"1"}`); err != nil || out != `["buy milk"]` {
		t.Fatalf("find with key=value: %q %v", out, err)
	}
	for args, want := range map[string]string{
		`{"op":"add"}`:                             `notes: invalid arguments: op "add": missing the required field "body"`,
		`{"op":"add","args":{"body":""}}`:          `op "add": "body" must be at least 1 characters long`,
		`{"op":"drop"}`:                            `"op" must be one of "add", "find", not "drop"`,
		`{"args":{}}`:                              `missing the required field "op"`,
		`{"op":"find","args":{"query":"x"},"x":1}`: `unknown field "x"`,
	} {
		if _, err := call(t, box, args); !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
	if !tools.HasSideEffects(box) || tools.LimitsOf(box).Timeout != time.Minute {
		t.Errorf("the collapsed tool's side effects and limits are the largest of its operations'")
	}

	expanded := tools.Expanded(tools.Calculator{}, box)
	reg, err := tools.NewRegistry(expanded...)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(reg.Names(), " "); got != "calculator notes_add notes_find" {
		t.Fatalf("expanded names: %s", got)
	}
	find, _ := reg.Get("notes_find")
	if out, err := call(t, find, `{"query":"milk"}`); err != nil || out != `["buy milk"]` {
		t.Fatalf("notes_find: %q %v", out, err)
	}
	if _, err := call(t, find, `{}`); err == nil || !strings.HasPrefix(err.Error(), `notes_find: invalid arguments: missing the required field "query"`) {
		t.Fatalf("notes_find error: %v", err)
	}
	if tools.HasSideEffects(find) || tools.LimitsOf(find).Timeout != time.Minute {
		t.Errorf("an expanded operation keeps its own options")
	}
}

func TestToolboxRefusesBadOperations(t *testing.T) {
	nb := &noteBook{}
	for name, subs := range map[string][]tools.SubTool{
		"none":      nil,
		"duplicate": {tools.Sub("add", "a", nb.Add), tools.Sub("add", "b", nb.Add)},
		"bad name":  {tools.Sub("a b", "a", nb.Add)},
		"empty":     {{}},
		"too long":  {tools.Sub(strings.Repeat("x", 60), "a", nb.Add)},
	} {
		if _, err := tools.NewToolbox("notes", "d", subs...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestTruncate(t *testing.T) {
	if got := tools.Truncate("short", 10); got != "short" {
		t.Errorf("short: %q", got)
	}
	big := strings.Repeat("x", 10<<20)
	got := tools.Truncate(big, 16384)
	if !strings.HasPrefix(got, strings.Repeat("x", 16384)+"\n[truncated: 10485760 bytes, showing the first 16384]") || len(got) > 16384+100 {
		t.Errorf("big: %d bytes ending %q", len(got), got[len(got)-60:])
	}
	if got := tools.Truncate("ééé", 3); got != "é\n[truncated: 6 bytes, showing the first 2]" {
		t.Errorf("cut inside a character: %q", got)
	}
}

// rawTool takes any JSON and echoes it: a tool from elsewhere (say, an MCP server).
type rawTool struct{}

func (rawTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "raw", Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)}
}
func (rawTool) Call(_ context.Context, c tools.Call) (string, error) { return c.Arguments, nil }
func (rawTool) Source() string                                       { return "mcp:test" }

func TestValidatedChecksAToolsArgumentsAgainstItsSchema(t *testing.T) {
	v, err := tools.Validated(rawTool{})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := call(t, v, `n=3`); err != nil || out != `{"n":3}` {
		t.Fatalf("coerced: %q %v", out, err)
	}
	if _, err := call(t, v, `{}`); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Fatalf("missing n: %v", err)
	}
	if tools.SourceOf(v) != "mcp:test" || !tools.HasSideEffects(v) {
		t.Fatal("Validated lost the tool's capabilities")
	}
}

// One tool serves many calls at once (the performer runs up to its bound together).
func TestFuncIsSafeForConcurrentCalls(t *testing.T) {
	tool := tools.MustFunc("fetch", "d", func(_ context.Context, a fetchArgs) (string, error) { return a.URL, nil })
	errs := make(chan error, 64)
	for i := range 64 {
		go func() {
			url := strings.Repeat("u", i+1)
			out, err := tool.Call(context.Background(), tools.Call{Arguments: `url=` + url + `, tries="2"`})
			if err == nil && out != url {
				err = errors.New("got " + out)
			}
			errs <- err
		}()
	}
	for range 64 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("calls did not return")
		}
	}
}

func TestSchemaForTags(t *testing.T) {
	type args struct {
		Level int      `json:"level" tool:"enum=1|2|3,optional"`
		Code  string   `json:"code,omitempty" tool:"required,pattern=^[A-Z]{2,3}$"`
		Ratio *float64 `json:"ratio,omitempty" tool:"exclusiveMinimum=0,exclusiveMaximum=1"`
		Flags []bool   `json:"flags,omitempty" tool:"minItems=1"`
		Skip  string   `json:"-"`
	}
	s, err := tools.SchemaFor[args]()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(s)
	want := `{"type":"object","properties":{"level":{"type":"integer","enum":[1,2,3]},"code":{"type":"string","pattern":"^[A-Z]{2,3}$"},` +
		`"ratio":{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1},"flags":{"type":"array","items":{"type":"boolean"},"minItems":1}},` +
		`"required":["code"],"additionalProperties":false}`
	if string(b) != want {
		t.Fatalf("schema\n%s\nwant\n%s", b, want)
	}
	tool := tools.MustFunc("t", "d", func(_ context.Context, a args) (args, error) { return a, nil })
	for in, want := range map[string]string{
		`{"code":"AB","level":"2"}`:        `{"level":2,"code":"AB"}`,
		`{"code":"ABCD"}`:                  `error: "code" does not match the schema: pattern`,
		`{"code":"AB","level":4}`:          `error: "level" must be one of 1, 2, 3, not 4`,
		`{"code":"AB","ratio":1}`:          `error: "ratio" must be less than 1, not 1`,
		`{"code":"AB","flags":[]}`:         `error: "flags" must have at least 1 items, not 0`,
		`{"code":"AB","flags":["false"]}`:  `{"level":0,"code":"AB","flags":[false]}`,
		`code=AB, ratio=0.5, flags=[true]`: `{"level":0,"code":"AB","ratio":0.5,"flags":[true]}`,
	} {
		out, err := call(t, tool, in)
		if err != nil {
			out = "error: " + strings.TrimPrefix(err.Error(), "t: invalid arguments: ")
		}
		if !strings.HasPrefix(out, want) {
			t.Errorf("%s: %s, want %s", in, out, want)
		}
	}
}

// BenchmarkFuncToolCall measures parsing, coercion and validation of a typical call
// against calling the function directly.
func BenchmarkFuncToolCall(b *testing.B) {
	fn := func(_ context.Context, a fetchArgs) (string, error) { return a.URL, nil }
	tool := tools.MustFunc("fetch", "d", fn)
	args := `{"url":"https://example.com/page","method":"GET","tries":"2","tags":["a"]}`
	b.Run("tool", func(b *testing.B) {
		for b.Loop() {
			if _, err := tool.Call(context.Background(), tools.Call{Arguments: args}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			var a fetchArgs
			if err := json.Unmarshal([]byte(`{"url":"https://example.com/page","method":"GET","tries":2,"tags":["a"]}`), &a); err != nil {
				b.Fatal(err)
			}
			_, _ = fn(context.Background(), a)
		}
	})
}

func TestTheCallKeyReachesTheFunction(t *testing.T) {
	type noArgs struct{}
	keyOf := func(ctx context.Context, _ noArgs) (string, error) { return "key=" + tools.CallKey(ctx), nil }
	box, err := tools.NewToolbox("box", "Tells its call's key.", tools.Sub("key", "Tells the key.", keyOf))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tool tools.Tool
		args string
	}{{box.Expand()[0], `{}`}, {box, `{"op":"key"}`}} {
		out, err := c.tool.Call(context.Background(), tools.Call{Key: "s-1/7", Arguments: c.args})
		if err != nil || out != "key=s-1/7" {
			t.Errorf("%s: got %q, %v; want key=s-1/7", c.tool.Spec().Name, out, err)
		}
		out, err = c.tool.Call(context.Background(), tools.Call{Arguments: c.args})
		if err != nil || out != "key=" {
			t.Errorf("%s without a key: got %q, %v; want key=", c.tool.Spec().Name, out, err)
		}
	}
}
