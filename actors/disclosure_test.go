package actors_test

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

type groupTool struct{ name, source string }

func (g groupTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: g.name, Description: g.name}
}
func (g groupTool) Source() string                                 { return g.source }
func (groupTool) Call(context.Context, tools.Call) (string, error) { return "ok", nil }

// What a session offers is folded from its recorded load_tools results: only
// successful ones, only answers to calls it waits on, and the ModelRequested event
// records the names offered.
func TestLoadedToolsAreFoldedFromRecordedResults(t *testing.T) {
	d, err := disclosure.New(disclosure.Catalog, []tools.Tool{tools.Calculator{}, groupTool{"x_a", "mcp:x"}, groupTool{"y_a", "mcp:y"}})
	if err != nil {
		t.Fatal(err)
	}
	agent := actors.Agent{Model: "m", Disclosure: d}
	for _, tl := range d.Tools() {
		agent.Tools = append(agent.Tools, tl.Spec())
	}
	st := actors.NewSessionState("s")
	seq := uint64(0)
	apply := func(p messages.Payload) {
		t.Helper()
		seq++
		if err := st.Apply(env(t, p, "s", seq, "task-1")); err != nil {
			t.Fatal(err)
		}
	}
	offered := func() string {
		var n []string
		for _, s := range st.Request(agent).Tools {
			n = append(n, s.Name)
		}
		return strings.Join(n, ",")
	}
	apply(&messages.TaskSubmitted{Input: "go"})
	if got := offered(); got != "calculator,load_tools" {
		t.Fatalf("first request offers %s", got)
	}
	// A failed load loads nothing; a successful one loads its group.
	step := func(group string, fail bool) {
		t.Helper()
		mr := st.Decide(agent, seq+1, 0).Payload.(*messages.ModelRequested)
		apply(mr)
		apply(&messages.ModelResponded{Key: mr.Key, Message: messages.ChatMessage{Role: messages.RoleAssistant,
			ToolCalls: []messages.ToolCall{{ID: group, Name: actors.ToolLoadTools, Arguments: `{"group":"` + group + `"}`}}}})
		req := st.Decide(agent, seq+1, 0).Payload.(*messages.ToolCallRequested)
		apply(req)
		done := &messages.ToolCallCompleted{Key: req.Key, CallID: req.CallID, Tool: req.Tool}
		if fail {
			done.Error = "no group"
			done.Result = `{"loaded":["y_a"]}`
		} else {
			done.Result = `{"group":"` + group + `","loaded":["x_a"]}`
		}
		apply(done)
		// A duplicate answer is not folded twice, nor a stale one.
		apply(&messages.ToolCallCompleted{Key: req.Key, CallID: req.CallID, Tool: req.Tool, Result: `{"loaded":["y_a"]}`})
	}
	step("mcp:nope", true)
	if got := offered(); got != "calculator,load_tools" {
		t.Fatalf("after a failed load: %s", got)
	}
	step("mcp:x", false)
	if got := offered(); got != "calculator,load_tools,x_a" {
		t.Fatalf("after loading mcp:x: %s", got)
	}
	mr := st.Decide(agent, seq+1, 0).Payload.(*messages.ModelRequested)
	if strings.Join(mr.Tools, ",") != "calculator,load_tools,x_a" {
		t.Errorf("ModelRequested.Tools = %v", mr.Tools)
	}
}
