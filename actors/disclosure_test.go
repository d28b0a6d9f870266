package actors_test

import (
	"context"
	"encoding/json"
	"fmt"
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

// With a catalog, the disclosure picks among the catalog's tools as they are at each
// request: the prompt's section names the catalog's servers, a tool the session
// loaded from it is offered and called like any other, and the tool section is the
// same bytes from one request to the next until the catalog changes.
func TestDisclosureFollowsTheCatalog(t *testing.T) {
	cat := &catalog{}
	cat.set()
	d, err := disclosure.New(disclosure.Search, []tools.Tool{tools.Calculator{}}, disclosure.WithCatalog(cat))
	if err != nil {
		t.Fatal(err)
	}
	agent := actors.Agent{Model: "m", SystemPrompt: "Be brief.", Disclosure: d, Catalog: cat}
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
	apply(&messages.TaskSubmitted{Input: "go"})
	req := st.Request(agent)
	if got := strings.Join(toolNames(req.Tools), ","); got != "calculator,call_tool,search_tools" || req.Messages[0].Content != "Be brief." {
		t.Fatalf("before the server joined: %s %q", got, req.Messages[0].Content)
	}

	cat.set(groupTool{"wx__forecast", "mcp:wx"}, groupTool{"wx__alerts", "mcp:wx"})
	first, _ := json.Marshal(st.Request(agent))
	if again, _ := json.Marshal(st.Request(agent)); string(again) != string(first) {
		t.Fatalf("two requests over one catalog differ:\n%s\n%s", first, again)
	}
	req = st.Request(agent)
	if !strings.HasPrefix(req.Messages[0].Content, "Be brief.\n\n## More tools\n\n2 more tools are available (from mcp:wx)") {
		t.Errorf("system prompt = %q", req.Messages[0].Content)
	}
	// The model searches, the search's answer is recorded, and the tool it loaded
	// is offered, and called directly, like the agent's own.
	mr := st.Decide(agent, seq+1, 0).Payload.(*messages.ModelRequested)
	apply(mr)
	apply(&messages.ModelResponded{Key: mr.Key, Message: messages.ChatMessage{Role: messages.RoleAssistant,
		ToolCalls: []messages.ToolCall{{ID: "c1", Name: actors.ToolSearchTools, Arguments: `{"query":"forecast"}`}}}})
	call := st.Decide(agent, seq+1, 0).Payload.(*messages.ToolCallRequested)
	apply(call)
	apply(&messages.ToolCallCompleted{Key: call.Key, CallID: call.CallID, Tool: call.Tool, Result: `{"loaded":["wx__forecast"]}`})
	if got := strings.Join(toolNames(st.Request(agent).Tools), ","); got != "calculator,call_tool,search_tools,wx__forecast" {
		t.Errorf("after the search: %s", got)
	}
	mr = st.Decide(agent, seq+1, 0).Payload.(*messages.ModelRequested)
	if strings.Join(mr.Tools, ",") != "calculator,call_tool,search_tools,wx__forecast" {
		t.Errorf("ModelRequested.Tools = %v", mr.Tools)
	}
	apply(mr)
	apply(&messages.ModelResponded{Key: mr.Key, Message: messages.ChatMessage{Role: messages.RoleAssistant,
		ToolCalls: []messages.ToolCall{{ID: "c2", Name: "wx__forecast", Arguments: `{}`}}}})
	if _, ok := st.Decide(agent, seq+1, 0).Payload.(*messages.ToolCallRequested); !ok {
		t.Fatal("the loaded catalog tool was not requested")
	}

	// The server leaves: its tool is no longer offered, though the load stays recorded.
	cat.set()
	if got := strings.Join(toolNames(st.Request(agent).Tools), ","); got != "calculator,call_tool,search_tools" {
		t.Errorf("after the server left: %s", got)
	}
}

func toolNames(specs []messages.ToolSpec) []string {
	var n []string
	for _, s := range specs {
		n = append(n, s.Name)
	}
	return n
}

// From decision rules 9 a request's system prompt takes the disclosure's bounded
// section (BoundedDisclosure): 4,000 catalog tools no longer put their every name
// in every request. A task of rules 8 still gets the whole section.
func TestRequestsTakeTheBoundedSectionFromRules9(t *testing.T) {
	var ts []tools.Tool
	ts = append(ts, tools.Calculator{})
	for i := range 4000 {
		ts = append(ts, groupTool{fmt.Sprintf("server__operation_number_%04d", i), "mcp:big"})
	}
	d, err := disclosure.New(disclosure.Catalog, ts)
	if err != nil {
		t.Fatal(err)
	}
	agent := actors.Agent{Model: "m", SystemPrompt: "Be brief.", Disclosure: d,
		Context: actors.ContextOptions{Window: 128000, Compression: actors.Compression{Model: actors.NoSummaryModel}}}
	for _, rules := range []int{8, actors.ContextRules} {
		st := actors.NewSessionState("s")
		if err := st.Apply(env(t, &messages.TaskSubmitted{Input: "go", Rules: rules}, "s", 1, "task-1")); err != nil {
			t.Fatal(err)
		}
		if _, ok := st.Decide(agent, 2, 0).Payload.(*messages.ModelRequested); !ok {
			t.Fatalf("rules %d: no model request", rules)
		}
		system := st.Request(agent).Messages[0].Content
		switch {
		case rules < 9 && !strings.Contains(system, "server__operation_number_3999"):
			t.Fatalf("rules %d: the section is not whole (%d bytes)", rules, len(system))
		case rules >= 9 && (len(system) > disclosure.MaxPromptSection+1<<10 || !strings.Contains(system, "- mcp:big (4000 tools): server__operation_number_0000, ") || !strings.Contains(system, "… and 3480 more")):
			t.Fatalf("rules %d: the system prompt is %d bytes: %.200s … %s", rules, len(system), system, system[max(0, len(system)-200):])
		}
	}
}

type describedTool struct{ name, desc, source string }

func (d describedTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: d.name, Description: d.desc}
}
func (d describedTool) Source() string                                 { return d.source }
func (describedTool) Call(context.Context, tools.Call) (string, error) { return "ok", nil }

// search_tools' answer is a recorded effect: a session recorded before queries in
// Chinese were read as character pairs (its search "查询天气预报" then found nothing)
// folds to the same requests now that the same search would find the weather tool.
func TestSearchToolsFoldsFromTheRecordNotTheRanking(t *testing.T) {
	d, err := disclosure.New(disclosure.Search, []tools.Tool{tools.Calculator{}, describedTool{"wx__forecast", "天气预报 for a city", "mcp:wx"}})
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
	apply(&messages.TaskSubmitted{Input: "天气"})
	before := st.Decide(agent, seq+1, 0).Payload.(*messages.ModelRequested)
	apply(before)
	apply(&messages.ModelResponded{Key: before.Key, Message: messages.ChatMessage{Role: messages.RoleAssistant,
		ToolCalls: []messages.ToolCall{{ID: "c1", Name: actors.ToolSearchTools, Arguments: `{"query":"查询天气预报"}`}}}})
	req := st.Decide(agent, seq+1, 0).Payload.(*messages.ToolCallRequested)
	apply(req)
	// The answer as the code before character pairs wrote it: nothing found.
	apply(&messages.ToolCallCompleted{Key: req.Key, CallID: req.CallID, Tool: req.Tool, Result: `{"query":"查询天气预报","loaded":[],"note":"no tool matches"}`})
	mr := st.Decide(agent, seq+1, 0).Payload.(*messages.ModelRequested)
	if strings.Join(mr.Tools, ",") != strings.Join(before.Tools, ",") {
		t.Errorf("after the recorded empty search the request offers %v, before it %v", mr.Tools, before.Tools)
	}
	for _, n := range mr.Tools {
		if n == "wx__forecast" {
			t.Errorf("the fold re-ran the search: %v", mr.Tools)
		}
	}
	// The same search run now finds it, so a fold that ranked would differ.
	hits, _ := d.Search(context.Background(), "查询天气预报", 5)
	if len(hits) == 0 || hits[0].Name != "wx__forecast" {
		t.Fatalf("the search now finds %v", hits)
	}
}
