package tools

import (
	"context"

	"github.com/troupe-run/troupe/messages"
)

// Validated returns t with its arguments read by an ArgumentParser for its own
// schema (t.Spec().Parameters) before t sees them: key=value pairs and coercible
// values are accepted, invalid arguments are refused with an *ArgumentError, and t's
// Call receives the arguments as compact JSON. It is for tools that take raw JSON
// from elsewhere (an MCP server's, say); Func and Toolbox tools parse their own.
// The result keeps t's Limits, Source and SideEffects. It fails on a schema the
// parser cannot use.
func Validated(t Tool) (Tool, error) {
	spec := t.Spec()
	p, err := NewArgumentParser(spec.Name, spec.Parameters, LimitsOf(t).MaxArguments)
	if err != nil {
		return nil, err
	}
	return &validated{tool: t, parser: p}, nil
}

type validated struct {
	tool   Tool
	parser *ArgumentParser
}

var (
	_ Limits    = (*validated)(nil)
	_ Effectful = (*validated)(nil)
	_ Sourced   = (*validated)(nil)
)

func (v *validated) Spec() messages.ToolSpec { return v.tool.Spec() }

func (v *validated) Call(ctx context.Context, c Call) (string, error) {
	args, err := v.parser.ParseJSON(c.Arguments)
	if err != nil {
		return "", err
	}
	c.Arguments = string(args)
	return v.tool.Call(ctx, c)
}

func (v *validated) Limits() CallLimits {
	if l, ok := v.tool.(Limits); ok {
		return l.Limits()
	}
	return CallLimits{}
}

func (v *validated) SideEffects() bool { return HasSideEffects(v.tool) }
func (v *validated) Source() string    { return SourceOf(v.tool) }
