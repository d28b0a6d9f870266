package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/troupe-run/troupe/internal/jsonesc"
	"github.com/troupe-run/troupe/messages"
)

// FuncTool is a Go function made a Tool by Func: its arguments are parsed, coerced
// and validated against a JSON Schema derived from the function's argument type
// (ArgumentParser), decoded into that type, and its result is rendered as text. It is
// immutable and safe for concurrent use when the function is.
type FuncTool struct {
	spec        messages.ToolSpec
	parser      *ArgumentParser
	call        func(ctx context.Context, tool string, args []byte) (string, error)
	limits      CallLimits
	sideEffects bool
	source      string
	modelUsage  bool
	wholeChars  bool
}

var (
	_ Tool      = (*FuncTool)(nil)
	_ Limits    = (*FuncTool)(nil)
	_ Effectful = (*FuncTool)(nil)
	_ Sourced   = (*FuncTool)(nil)
)

// Option configures a function tool (Func, Op).
type Option func(*funcOptions)

type funcOptions struct {
	schema      json.RawMessage
	edit        []func(*jsonschema.Schema)
	limits      CallLimits
	sideEffects bool
	source      string
	modelUsage  bool
	wholeChars  bool
}

// WithSchema replaces the schema derived from the argument type by one written by
// hand (a JSON Schema object). The arguments must still decode into the type.
func WithSchema(schema json.RawMessage) Option {
	return func(o *funcOptions) { o.schema = schema }
}

// WithSchemaFunc edits the schema (derived or given by WithSchema) before it is used:
// to add a keyword the tags cannot say, or to reword a description.
func WithSchemaFunc(edit func(*jsonschema.Schema)) Option {
	return func(o *funcOptions) { o.edit = append(o.edit, edit) }
}

// WithTimeout bounds one call of the tool (CallLimits.Timeout).
func WithTimeout(d time.Duration) Option { return func(o *funcOptions) { o.limits.Timeout = d } }

// WithConcurrency bounds the tool's calls running at once (CallLimits.Concurrency).
func WithConcurrency(n int) Option { return func(o *funcOptions) { o.limits.Concurrency = n } }

// WithMaxOutput bounds the result handed to the model, in bytes (CallLimits.MaxOutput).
func WithMaxOutput(n int) Option { return func(o *funcOptions) { o.limits.MaxOutput = n } }

// WithMaxArguments bounds the argument text, in bytes (CallLimits.MaxArguments).
func WithMaxArguments(n int) Option { return func(o *funcOptions) { o.limits.MaxArguments = n } }

// WithSideEffects says whether the function changes the world (default true: a
// function that only reads should say WithSideEffects(false)).
func WithSideEffects(b bool) Option { return func(o *funcOptions) { o.sideEffects = b } }

// WithModelUsage says that the tool's calls may spend model tokens on the task's
// behalf and report them (ReportUsage), as a sub-agent does (SpendsModelTokens).
func WithModelUsage() Option { return func(o *funcOptions) { o.modelUsage = true } }

// WithWholeCharacters makes the tool refuse arguments holding a \u escape of half
// a UTF-16 surrogate pair (a high one not followed by the escape of a low one, or a
// low one alone): JSON decoding would give the function U+FFFD in its place, so a
// tool that stores what it is given (a memory) would keep another text than the
// model wrote. The model gets an ArgumentError saying where, and nothing is done.
func WithWholeCharacters() Option { return func(o *funcOptions) { o.wholeChars = true } }

// WithSource sets the tool's source (Sourced), e.g. "skill:pdf"; default "builtin".
func WithSource(s string) Option { return func(o *funcOptions) { o.source = s } }

// Func makes fn a tool named name. The JSON Schema of its arguments is derived from
// A (SchemaFor: a struct, with json, jsonschema and tool tags), unless WithSchema
// gives one. The result R reaches the model as text: a string as it is, anything
// else as compact JSON. An error from fn is the call's error; wrap
// ErrInvalidArguments in it when the arguments were at fault. fn reads the call's
// idempotency key with CallKey(ctx).
//
//	type weatherArgs struct {
//		City  string `json:"city" jsonschema:"the city, e.g. Paris"`
//		Units string `json:"units,omitempty" tool:"enum=metric|imperial"`
//	}
//	weather, err := tools.Func("weather", "Current weather in a city.",
//		func(ctx context.Context, a weatherArgs) (Report, error) { ... },
//		tools.WithTimeout(10*time.Second), tools.WithSideEffects(false))
func Func[A, R any](name, description string, fn func(context.Context, A) (R, error), opts ...Option) (*FuncTool, error) {
	if err := checkToolName(name); err != nil {
		return nil, fmt.Errorf("tools: %w", err)
	}
	if fn == nil {
		return nil, fmt.Errorf("tools: tool %q: the function is nil", name)
	}
	o := funcOptions{sideEffects: true}
	for _, opt := range opts {
		opt(&o)
	}
	var s *jsonschema.Schema
	if len(o.schema) > 0 {
		s = new(jsonschema.Schema)
		if err := json.Unmarshal(o.schema, s); err != nil {
			return nil, fmt.Errorf("tools: tool %q: WithSchema: %w", name, err)
		}
	} else {
		var err error
		if s, err = SchemaFor[A](); err != nil {
			return nil, fmt.Errorf("tools: tool %q: %w", name, err)
		}
	}
	for _, edit := range o.edit {
		edit(s)
	}
	parser, err := newArgumentParser(name, s, o.limits.MaxArguments)
	if err != nil {
		return nil, err
	}
	params, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("tools: tool %q: schema: %w", name, err)
	}
	t := &FuncTool{
		spec:        messages.ToolSpec{Name: name, Description: strings.TrimSpace(description), Parameters: params},
		parser:      parser,
		limits:      o.limits,
		sideEffects: o.sideEffects,
		source:      o.source,
		modelUsage:  o.modelUsage,
		wholeChars:  o.wholeChars,
	}
	t.call = func(ctx context.Context, tool string, raw []byte) (string, error) {
		var args A
		if err := json.Unmarshal(raw, &args); err != nil {
			return "", &ArgumentError{Tool: tool, Reason: "the arguments do not fit the function: " + strings.TrimPrefix(err.Error(), "json: ")}
		}
		r, err := fn(ctx, args)
		if err != nil {
			return "", err
		}
		out, err := renderResult(r)
		if err != nil {
			return "", fmt.Errorf("%s: %w", tool, err)
		}
		return out, nil
	}
	return t, nil
}

// MustFunc is Func for tools whose definition is fixed at compile time; it panics
// where Func fails.
func MustFunc[A, R any](name, description string, fn func(context.Context, A) (R, error), opts ...Option) *FuncTool {
	t, err := Func(name, description, fn, opts...)
	if err != nil {
		panic(err)
	}
	return t
}

// Spec implements Tool.
func (t *FuncTool) Spec() messages.ToolSpec {
	s := t.spec
	s.Parameters = append(json.RawMessage(nil), s.Parameters...)
	return s
}

// Call implements Tool: it parses the arguments (ArgumentParser), then calls the
// function with c.Key in its context (CallKey).
func (t *FuncTool) Call(ctx context.Context, c Call) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	args, err := t.parser.ParseJSON(c.Arguments)
	if err != nil {
		return "", err
	}
	if t.wholeChars {
		if err := wholeCharacters(t.spec.Name, c.Arguments); err != nil {
			return "", err
		}
	}
	return t.call(WithCallKey(ctx, c.Key), t.spec.Name, args)
}

// Parser returns the tool's argument parser.
func (t *FuncTool) Parser() *ArgumentParser { return t.parser }

// Limits implements Limits.
func (t *FuncTool) Limits() CallLimits { return t.limits }

// SideEffects implements Effectful.
func (t *FuncTool) SideEffects() bool { return t.sideEffects }

// SpendsModelTokens implements ModelSpender.
func (t *FuncTool) SpendsModelTokens() bool { return t.modelUsage }

// Source implements Sourced.
func (t *FuncTool) Source() string {
	if t.source == "" {
		return SourceBuiltin
	}
	return t.source
}

// wholeCharacters refuses arguments (valid JSON) holding a \u escape of a lone
// UTF-16 surrogate (WithWholeCharacters).
func wholeCharacters(tool, raw string) error {
	at := jsonesc.LoneSurrogateAt([]byte(raw))
	if at < 0 {
		return nil
	}
	return &ArgumentError{Tool: tool, Pos: utf8.RuneCountInString(raw[:at]) + 1,
		Reason: fmt.Sprintf("the arguments hold %s, half of a UTF-16 surrogate pair, not a character: write whole characters (an emoji as itself, or as the escapes of both its halves); nothing was done", raw[at:at+6])}
}
