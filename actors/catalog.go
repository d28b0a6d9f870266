package actors

import (
	"context"
	"fmt"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// ToolCatalog is a set of tools that can change while the node runs: the tools of the
// MCP servers a node is connected to (mcp.Client), which come and go as servers
// connect, disconnect and send notifications/tools/list_changed. The node's
// tools.Registry is built once, at start; a catalog is read where it is used: by the
// agent at each model request (Agent.Catalog) and by LocalEffects at each call of a
// tool its registry lacks (LocalEffectsConfig.Catalog).
//
// Implementations are safe for concurrent use.
type ToolCatalog interface {
	// Specs returns the catalog's tools now, sorted by name, with compacted JSON
	// Schemas; the same tools give byte-identical specs. The caller must not modify
	// the result.
	Specs() []messages.ToolSpec
	// Tool returns the tool with that name, if the catalog has it now.
	Tool(name string) (tools.Tool, bool)
}

// CatalogTools returns the tools of c now, sorted by name (nil when c is nil): what a
// ToolDisclosure discloses of the catalog (Agent.Disclosure). A catalog that lists
// its tools itself (a method Tools() []tools.Tool, sorted by name, as mcp.Client
// has) is read in one call.
func CatalogTools(c ToolCatalog) []tools.Tool {
	if c == nil {
		return nil
	}
	if l, ok := c.(interface{ Tools() []tools.Tool }); ok {
		return l.Tools()
	}
	specs := c.Specs()
	out := make([]tools.Tool, 0, len(specs))
	for _, s := range specs {
		if t, ok := c.Tool(s.Name); ok {
			out = append(out, t)
		}
	}
	return out
}

// catalogPerformer returns the performer of the catalog tool name, made on its first
// call with the bounds of every tool (ToolTimeout, ToolConcurrency) and kept: the
// tool is looked up again at each call, so a call after the catalog changed runs the
// tool as it is now, or is answered ErrNoSuchTool when it is gone. The caller holds
// e.mu.
func (e *LocalEffects) catalogPerformer(name string) (*performer, bool) {
	if e.cfg.Catalog == nil {
		return nil, false
	}
	if _, ok := e.cfg.Catalog.Tool(name); !ok {
		return nil, false
	}
	if p, ok := e.catalog[name]; ok {
		return p, true
	}
	t := catalogTool{cat: e.cfg.Catalog, name: name}
	p := &performer{
		e:       e,
		timeout: e.cfg.ToolTimeout, limit: e.cfg.ToolConcurrency, timedOut: ErrToolTimeout,
		perform: func(ctx context.Context, req messages.EffectRequest) messages.EffectReply {
			// Under the tool's limits, as a tool of the agent's own (toolPerformer):
			// arguments past their size refused unread, the output made UTF-8 as the
			// log records it and cut to its size.
			out, err := t.callLimited(ctx, tools.Call{Key: req.Tool.Key, Arguments: req.Tool.Arguments, Agent: req.Agent, Outward: req.Outward})
			rep := messages.EffectReply{Output: out}
			if err != nil {
				rep.Error = err.Error()
			}
			return rep
		},
		failed:   func(err error) messages.EffectReply { return messages.EffectReply{Error: err.Error()} },
		panicked: func(r any) error { return fmt.Errorf("%w: %v", ErrToolPanicked, r) },
	}
	p.withTimeoutCause()
	if e.catalog == nil {
		e.catalog = map[string]*performer{}
	}
	e.catalog[name] = p
	return p, true
}

// catalogTool is the tool of a catalog with that name, looked up at each call: the
// tool as it is now, or ErrNoSuchTool when it left the catalog.
type catalogTool struct {
	cat  ToolCatalog
	name string
}

func (t catalogTool) Spec() messages.ToolSpec {
	if tl, ok := t.cat.Tool(t.name); ok {
		return tl.Spec()
	}
	return messages.ToolSpec{Name: t.name}
}

func (t catalogTool) Call(ctx context.Context, c tools.Call) (string, error) {
	tl, err := t.now()
	if err != nil {
		return "", err
	}
	return tl.Call(ctx, c)
}

// callLimited calls the tool as it is now under its own limits (tools.CallLimited).
func (t catalogTool) callLimited(ctx context.Context, c tools.Call) (string, error) {
	tl, err := t.now()
	if err != nil {
		return "", err
	}
	return tools.CallLimited(ctx, tl, t.name, c)
}

// now is the catalog's tool of that name now, or ErrNoSuchTool.
func (t catalogTool) now() (tools.Tool, error) {
	tl, ok := t.cat.Tool(t.name)
	if !ok {
		return nil, fmt.Errorf("%w: %q (it left the catalog)", ErrNoSuchTool, t.name)
	}
	return tl, nil
}
