package actors_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// catalog is a ToolCatalog whose tools the test changes.
type catalog struct {
	mu    sync.Mutex
	tools map[string]tools.Tool
}

func (c *catalog) set(ts ...tools.Tool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tools = map[string]tools.Tool{}
	for _, t := range ts {
		c.tools[t.Spec().Name] = t
	}
}

func (c *catalog) Specs() []messages.ToolSpec {
	c.mu.Lock()
	defer c.mu.Unlock()
	reg, _ := tools.NewRegistry(func() []tools.Tool {
		var ts []tools.Tool
		for _, t := range c.tools {
			ts = append(ts, t)
		}
		return ts
	}()...)
	return reg.Specs()
}

func (c *catalog) Tool(name string) (tools.Tool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.tools[name]
	return t, ok
}

// echo answers its name and arguments.
type echo struct{ name string }

func (e echo) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: e.name, Description: "echoes", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (e echo) Call(_ context.Context, c tools.Call) (string, error) {
	return e.name + " " + c.Arguments, nil
}

// The agent offers its own tools and the catalog's, sorted by name, read anew at
// each request; a catalog tool named like one of its own is left out.
func TestAgentReadsTheCatalogAtEachRequest(t *testing.T) {
	cat := &catalog{}
	cat.set(echo{"srv__b"}, echo{"calculator"})
	a := actors.Agent{Tools: []messages.ToolSpec{{Name: "clock"}, {Name: "calculator", Description: "own"}}, Catalog: cat}
	names := func() string {
		var n []string
		for _, s := range a.ToolSpecs() {
			n = append(n, s.Name+":"+s.Description)
		}
		return strings.Join(n, " ")
	}
	if got := names(); got != "calculator:own clock: srv__b:echoes" {
		t.Fatalf("tools %s", got)
	}
	cat.set(echo{"srv__a"})
	if got := names(); got != "calculator:own clock: srv__a:echoes" {
		t.Fatalf("tools after the catalog changed %s", got)
	}
	st := actors.NewSessionState("s")
	if req := st.Request(a); len(req.Tools) != 3 || req.Tools[2].Name != "srv__a" {
		t.Errorf("the model request offers %v", req.Tools)
	}
	// Without a catalog, the agent's tools keep their order.
	if got := (actors.Agent{Tools: a.Tools}).ToolSpecs(); got[0].Name != "clock" {
		t.Errorf("without a catalog: %v", got)
	}
}

// LocalEffects performs a catalog tool that its registry lacks, as the tool is at
// the time of the call; one that left the catalog is answered ErrNoSuchTool.
func TestLocalEffectsPerformsCatalogTools(t *testing.T) {
	cat := &catalog{}
	cat.set(echo{"srv__x"})
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Tools: registry(t), Catalog: cat})
	t.Cleanup(func() { _ = e.Close() })
	r := newReplies()
	perform := func(seq uint64, tool string) messages.EffectReply {
		t.Helper()
		req := toolRequest("s", seq, tool)
		e.Perform(req, r.to)
		waitUntil(t, "the reply", func() bool { return len(r.of(req.Key)) == 1 })
		return r.of(req.Key)[0]
	}
	if rep := perform(1, "srv__x"); rep.Error != "" || rep.Output != "srv__x {}" {
		t.Fatalf("reply %+v", rep)
	}
	cat.set(echo{"srv__y"})
	if rep := perform(2, "srv__x"); !strings.Contains(rep.Error, actors.ErrNoSuchTool.Error()) {
		t.Errorf("a tool gone from the catalog: %+v", rep)
	}
	if rep := perform(3, "srv__y"); rep.Output != "srv__y {}" {
		t.Errorf("a tool new in the catalog: %+v", rep)
	}
	if rep := perform(4, "nowhere"); !strings.Contains(rep.Error, actors.ErrNoSuchTool.Error()) {
		t.Errorf("an unknown tool: %+v", rep)
	}
}

// A catalog tool that hangs is cut off by the tool timeout, like any tool.
func TestLocalEffectsTimesOutCatalogTools(t *testing.T) {
	g := newGate()
	cat := &catalog{}
	cat.set(g)
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Tools: registry(t), Catalog: cat, ToolTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = e.Close() })
	r := newReplies()
	req := toolRequest("s", 1, "gate")
	e.Perform(req, r.to)
	waitUntil(t, "the reply", func() bool { return len(r.of(req.Key)) == 1 })
	if rep := r.of(req.Key)[0]; !strings.Contains(rep.Error, actors.ErrToolTimeout.Error()) {
		t.Errorf("reply %+v, want a timeout", rep)
	}
	// The reply can reach the session before the abandoned tool has seen its
	// context end, so wait for the tool to record why it ended.
	waitUntil(t, "the tool to see its context end", func() bool { return g.cause(req.Key.String()) != nil })
	if cause := g.cause(req.Key.String()); !errors.Is(cause, actors.ErrToolTimeout) {
		t.Errorf("the tool's context ended with %v", cause)
	}
}

// loud answers more than any output limit, with bytes that are not UTF-8.
type loud struct{}

func (loud) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "srv__loud", Description: "talks", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (loud) Call(context.Context, tools.Call) (string, error) {
	return "\xff" + strings.Repeat("x", 4*tools.DefaultMaxOutput), nil
}

// A catalog tool (an MCP server's) is called under the limits of any tool
// (tools.CallLimited): arguments past their size are refused unread, and its
// output is made UTF-8 as the log records it and cut to the output limit with a
// note. It was called bare: megabytes of a model's arguments went to the server,
// and its answer whole into the reply.
func TestLocalEffectsLimitsCatalogTools(t *testing.T) {
	cat := &catalog{}
	cat.set(loud{})
	e := actors.NewLocalEffects(actors.LocalEffectsConfig{Tools: registry(t), Catalog: cat})
	t.Cleanup(func() { _ = e.Close() })
	r := newReplies()
	req := toolRequest("s", 1, "srv__loud")
	e.Perform(req, r.to)
	waitUntil(t, "the reply", func() bool { return len(r.of(req.Key)) == 1 })
	rep := r.of(req.Key)[0]
	if rep.Error != "" || len(rep.Output) > tools.DefaultMaxOutput+512 || !strings.HasPrefix(rep.Output, "\ufffd") {
		t.Fatalf("reply of %d bytes (error %q), want the output cut to about %d, made UTF-8", len(rep.Output), rep.Error, tools.DefaultMaxOutput)
	}
	big := toolRequest("s", 2, "srv__loud")
	big.Tool.Arguments = `{"x":"` + strings.Repeat("y", tools.DefaultMaxArguments) + `"}`
	e.Perform(big, r.to)
	waitUntil(t, "the reply", func() bool { return len(r.of(big.Key)) == 1 })
	if rep := r.of(big.Key)[0]; !strings.Contains(rep.Error, "the limit is") {
		t.Fatalf("arguments past the limit: reply %+v", rep.Error)
	}
}
