package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
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
			return "", &ArgumentError{Tool: tool, Reason: unfitReason(err)}
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
		parsed, _ := decodeJSON(string(args), MaxArgumentDepth)
		if err := wholeCharacters(t.spec.Name, c.Arguments, parsed); err != nil {
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

// wholeCharacters refuses arguments holding a \u escape of a lone UTF-16
// surrogate (WithWholeCharacters): in raw, the model's text (a JSON object, or a
// double-quoted value of key=value pairs), or in a string of it that the parser
// read as the JSON object or array its schema wants, as parsed (Parse's value)
// shows. A string passed on as a string (a bare value of pairs, a string in JSON
// holding JSON text) is not JSON decoded: an escape in it is text.
func wholeCharacters(tool, raw string, parsed any) error {
	var written any
	if text := strings.TrimSpace(raw); strings.HasPrefix(text, "{") {
		if at := jsonesc.LoneSurrogateAt([]byte(raw)); at >= 0 {
			return &ArgumentError{Tool: tool, Pos: utf8.RuneCountInString(raw[:at]) + 1, Reason: loneReason("the arguments hold", raw[at:at+6])}
		}
		written, _ = decodeJSON(text, MaxArgumentDepth)
	} else if pairs, quoted, err := parsePairs(text); err == nil {
		// Key=value pairs: only a double-quoted value's escapes are JSON's; a
		// bare value is passed on as written.
		keys := slices.Sorted(maps.Keys(quoted))
		for _, k := range keys {
			if at := jsonesc.LoneSurrogateAt([]byte(quoted[k])); at >= 0 {
				return &ArgumentError{Tool: tool, Field: k, Reason: loneReason(fmt.Sprintf("the value of %s holds", k), quoted[k][at:at+6])}
			}
		}
		m := make(map[string]any, len(pairs))
		for k, v := range pairs {
			m[k] = v
		}
		written = m
	}
	if field, esc, ok := loneInJSONString(written, parsed, "", MaxArgumentDepth); ok {
		return &ArgumentError{Tool: tool, Field: field, Reason: loneReason(fmt.Sprintf("the JSON text of %s holds", field), esc)}
	}
	return nil
}

// loneReason says that where (the arguments, or one of their fields) holds esc,
// the escape of a lone surrogate.
func loneReason(where, esc string) string {
	return fmt.Sprintf("%s %s, half of a UTF-16 surrogate pair, not a character: write whole characters (an emoji as itself, or as the escapes of both its halves); nothing was done", where, esc)
}

// loneInJSONString finds, in written (the arguments as the model wrote them), a
// string that parsed (the same arguments as parsed) holds as an object or array
// and that holds the escape of a lone surrogate, at any depth; it returns the
// field's path and the escape.
func loneInJSONString(written, parsed any, path string, depth int) (string, string, bool) {
	if depth < 0 {
		return "", "", false
	}
	switch w := written.(type) {
	case string:
		switch parsed.(type) {
		case map[string]any, []any:
			if at := jsonesc.LoneSurrogateAt([]byte(w)); at >= 0 {
				return path, w[at : at+6], true
			}
			if inner, err := decodeJSON(strings.TrimSpace(w), MaxArgumentDepth); err == nil {
				return loneInJSONString(inner, parsed, path, depth-1)
			}
		}
	case map[string]any:
		p, ok := parsed.(map[string]any)
		if !ok {
			break
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if pv, ok := p[k]; ok {
				sub := k
				if path != "" {
					sub = path + "." + k
				}
				if f, esc, ok := loneInJSONString(w[k], pv, sub, depth-1); ok {
					return f, esc, true
				}
			}
		}
	case []any:
		p, ok := parsed.([]any)
		if !ok || len(p) != len(w) {
			break
		}
		for i := range w {
			if f, esc, ok := loneInJSONString(w[i], p[i], fmt.Sprintf("%s[%d]", path, i), depth-1); ok {
				return f, esc, true
			}
		}
	}
	return "", "", false
}

// unfitReason says why the checked arguments did not decode into the function's
// argument type. An integer outside its Go type's range (an int64 or uint64 field's
// schema has no bounds: 1e19 passes as an integer) is named with the range, as a
// schema's minimum and maximum are said; anything else in the decoder's words.
func unfitReason(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" && te.Type != nil && strings.HasPrefix(te.Value, "number ") {
		var lo, hi string
		switch bits := te.Type.Bits; te.Type.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			lo, hi = strconv.FormatInt(math.MinInt64>>(64-bits()), 10), strconv.FormatInt(math.MaxInt64>>(64-bits()), 10)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			lo, hi = "0", strconv.FormatUint(math.MaxUint64>>(64-bits()), 10)
		}
		if hi != "" {
			return fmt.Sprintf("%q must be an integer from %s to %s, not %s", te.Field, lo, hi, strings.TrimPrefix(te.Value, "number "))
		}
	}
	return "the arguments do not fit the function: " + strings.TrimPrefix(err.Error(), "json: ")
}
