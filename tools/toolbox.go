package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/troupe-run/troupe/messages"
)

// Expandable is a tool that offers sub-tools. As a Tool it is collapsed: one tool
// whose arguments are {"op": "<sub>", "args": {...}}; Expand returns it expanded:
// one tool per sub-tool, named <tool>_<sub>, each with its own schema. An agent
// offered many tools sees fewer, larger schemas collapsed, and simpler calls
// expanded; the choice is the agent's (Expanded).
type Expandable interface {
	Tool
	Expand() []Tool
}

// Expanded returns ts with every Expandable tool replaced by its sub-tools.
func Expanded(ts ...Tool) []Tool {
	out := make([]Tool, 0, len(ts))
	for _, t := range ts {
		if e, ok := t.(Expandable); ok {
			out = append(out, e.Expand()...)
			continue
		}
		out = append(out, t)
	}
	return out
}

// SubTool is one operation of a Toolbox, made by Sub.
type SubTool struct {
	name, description string
	build             func(fullName string) (*FuncTool, error)
}

// Sub makes the Go function fn (a method value, or any func) the operation name of a
// toolbox, as Func makes a tool: its schema is derived from A, its result rendered
// from R; opts are Func's.
func Sub[A, R any](name, description string, fn func(context.Context, A) (R, error), opts ...Option) SubTool {
	return SubTool{name: name, description: description, build: func(full string) (*FuncTool, error) {
		return Func(full, description, fn, opts...)
	}}
}

// Toolbox is a tool made of operations (sub-tools), registered in one call:
//
//	files, err := tools.NewToolbox("files", "Files under the work directory.",
//		tools.Sub("read", "Reads a text file.", f.Read, tools.WithSideEffects(false)),
//		tools.Sub("write", "Writes a text file.", f.Write),
//		tools.Sub("list", "Lists a directory.", f.List, tools.WithSideEffects(false)))
//
// Collapsed (the Toolbox itself) it is one tool taking {"op": "read", "args":
// {"path": "a.txt"}}, whose description lists each operation with the schema of its
// args; the args are checked against that schema when the call comes. Expanded
// (Expand) it is the tools files_read, files_write and files_list. It is immutable and
// safe for concurrent use when its functions are.
type Toolbox struct {
	spec        messages.ToolSpec
	parser      *ArgumentParser
	ops         map[string]*FuncTool
	order       []string
	limits      CallLimits
	sideEffects bool
	source      string
}

var (
	_ Expandable = (*Toolbox)(nil)
	_ Limits     = (*Toolbox)(nil)
	_ Effectful  = (*Toolbox)(nil)
	_ Sourced    = (*Toolbox)(nil)
)

// NewToolbox builds a toolbox named name from its operations, in the order given.
// It fails on a bad or duplicate operation name, a name that makes a tool name too
// long, and any error of Func.
func NewToolbox(name, description string, subs ...SubTool) (*Toolbox, error) {
	if err := checkToolName(name); err != nil {
		return nil, fmt.Errorf("tools: %w", err)
	}
	if len(subs) == 0 {
		return nil, fmt.Errorf("tools: toolbox %q has no operations", name)
	}
	b := &Toolbox{ops: map[string]*FuncTool{}}
	var desc strings.Builder
	desc.WriteString(strings.TrimSpace(description))
	desc.WriteString("\nCall it with {\"op\": OP, \"args\": {...}}; the operations and the JSON Schema of their args:")
	sources := map[string]bool{}
	for i, s := range subs {
		if s.build == nil || s.name == "" {
			return nil, fmt.Errorf("tools: toolbox %q: operation %d is empty: make it with tools.Sub", name, i)
		}
		if err := checkToolName(s.name); err != nil {
			return nil, fmt.Errorf("tools: toolbox %q: operation: %w", name, err)
		}
		if _, dup := b.ops[s.name]; dup {
			return nil, fmt.Errorf("tools: toolbox %q: two operations are named %q", name, s.name)
		}
		t, err := s.build(name + "_" + s.name)
		if err != nil {
			return nil, fmt.Errorf("tools: toolbox %q: operation %q: %w", name, s.name, err)
		}
		b.ops[s.name] = t
		b.order = append(b.order, s.name)
		fmt.Fprintf(&desc, "\n- %s: %s args: %s", s.name, strings.TrimSpace(s.description), t.spec.Parameters)
		l := t.limits
		b.limits.Timeout = max(b.limits.Timeout, l.Timeout)
		b.limits.Concurrency = max(b.limits.Concurrency, l.Concurrency)
		b.limits.MaxArguments = max(b.limits.MaxArguments, l.MaxArguments)
		b.limits.MaxOutput = max(b.limits.MaxOutput, l.MaxOutput)
		b.sideEffects = b.sideEffects || t.sideEffects
		sources[t.Source()] = true
	}
	if len(sources) == 1 {
		for s := range sources {
			b.source = s
		}
	}
	schema := &jsonschema.Schema{
		Type: "object",
		Properties: map[string]*jsonschema.Schema{
			"op": {Type: "string", Enum: toAny(b.order), Description: "the operation"},
			"args": {Type: "object", Description: "the operation's arguments, as its schema in the tool's description says " +
				"(omit them for an operation that takes none)"},
		},
		PropertyOrder: []string{"op", "args"},
		Required:      []string{"op"},
	}
	schema.AdditionalProperties = &jsonschema.Schema{Not: &jsonschema.Schema{}}
	var err error
	if b.parser, err = newArgumentParser(name, schema, b.limits.MaxArguments); err != nil {
		return nil, err
	}
	params, err := json.Marshal(schema)
	if err != nil {
		return nil, fmt.Errorf("tools: toolbox %q: schema: %w", name, err)
	}
	b.spec = messages.ToolSpec{Name: name, Description: desc.String(), Parameters: params}
	return b, nil
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Spec implements Tool: the collapsed tool.
func (b *Toolbox) Spec() messages.ToolSpec {
	s := b.spec
	s.Parameters = append(json.RawMessage(nil), s.Parameters...)
	return s
}

// Call implements Tool: it runs the operation the arguments name with their args,
// under the operation's own timeout when it has one. An error in the args names the
// operation: `files: invalid arguments: op "read": missing the required field "path"`.
func (b *Toolbox) Call(ctx context.Context, c Call) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	outer, err := b.parser.Parse(c.Arguments)
	if err != nil {
		return "", err
	}
	op, _ := outer["op"].(string)
	t := b.ops[op]
	if t.wholeChars { // before args is decoded (and the escape with it)
		if err := wholeCharacters(b.spec.Name, c.Arguments, outer); err != nil {
			var ae *ArgumentError
			if errors.As(err, &ae) {
				ae.Reason = fmt.Sprintf("op %q: %s", op, ae.Reason)
			}
			return "", err
		}
	}
	args, _ := outer["args"].(map[string]any)
	if args == nil {
		args = map[string]any{}
	}
	raw, err := marshalCompact(args)
	if err != nil {
		return "", err
	}
	if d := t.limits.Timeout; d > 0 && d < b.limits.Timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	sub := c // for the same agent, under the same key
	sub.Arguments = string(raw)
	out, err := t.Call(ctx, sub)
	var ae *ArgumentError
	if errors.As(err, &ae) {
		return "", &ArgumentError{Tool: b.spec.Name, Field: ae.Field, Pos: ae.Pos, Reason: fmt.Sprintf("op %q: %s", op, ae.Reason)}
	}
	return out, err
}

// Expand implements Expandable: one tool per operation, named <tool>_<op>, in the
// order they were given.
func (b *Toolbox) Expand() []Tool {
	out := make([]Tool, len(b.order))
	for i, op := range b.order {
		out[i] = b.ops[op]
	}
	return out
}

// Ops returns the operations' names, in the order they were given.
func (b *Toolbox) Ops() []string { return slices.Clone(b.order) }

// Limits implements Limits: the largest of the operations' limits.
func (b *Toolbox) Limits() CallLimits { return b.limits }

// SideEffects implements Effectful: whether any operation has side effects.
func (b *Toolbox) SideEffects() bool { return b.sideEffects }

// Source implements Sourced: the operations' source when they share one.
func (b *Toolbox) Source() string {
	if b.source == "" {
		return SourceBuiltin
	}
	return b.source
}
