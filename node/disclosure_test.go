package node_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
	"github.com/troupe-run/troupe/tools/skills"
)

// serverTool is a tool of an MCP-like server: its source is "mcp:<server>".
type serverTool struct {
	name, server string
}

func (s serverTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: s.name, Description: "The " + strings.ReplaceAll(s.name, "_", " ") + " tool of " + s.server,
		Parameters: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}}}`)}
}
func (s serverTool) Source() string { return "mcp:" + s.server }
func (s serverTool) Call(_ context.Context, c tools.Call) (string, error) {
	return s.name + " ran with " + c.Arguments, nil
}

func serverTools() []tools.Tool {
	return []tools.Tool{tools.Calculator{},
		serverTool{"tickets_open", "tickets"}, serverTool{"tickets_close", "tickets"},
		serverTool{"weather_forecast", "weather"}}
}

// requestLog records the tool section of every model request.
type requestLog struct {
	mu       sync.Mutex
	sections []string
	names    [][]string
	system   []string
}

func (l *requestLog) model(t *testing.T, steps ...llm.ScriptStep) llm.Model {
	t.Helper()
	m, err := llm.NewScripted(llm.Script{Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	return recordingModel{Model: m, fn: func(r llm.Request) {
		b, _ := json.Marshal(r.Tools)
		var n []string
		for _, s := range r.Tools {
			n = append(n, s.Name)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.sections = append(l.sections, string(b))
		l.names = append(l.names, n)
		if len(r.Messages) > 0 && r.Messages[0].Role == messages.RoleSystem {
			l.system = append(l.system, r.Messages[0].Content)
		}
	}}
}

func (l *requestLog) get() (sections []string, names []string, system []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.names {
		names = append(names, strings.Join(n, ","))
	}
	return append([]string(nil), l.sections...), names, append([]string(nil), l.system...)
}

func call(id, name, args string) llm.ScriptStep {
	return llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: id, Name: name, Arguments: args}}}
}

func toolResults(t *testing.T, events []messages.Envelope) map[string]messages.ToolCallCompleted {
	t.Helper()
	out := map[string]messages.ToolCallCompleted{}
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted {
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			c := p.(*messages.ToolCallCompleted)
			out[c.CallID] = *c
		}
	}
	return out
}

// Under catalog, the first request offers the builtins and load_tools; once the model
// loads a group, the next requests offer its schemas too, byte-identically from step
// to step; a node restarted on the same log offers the same loaded set in the
// session's next task, and the recorded session verifies against the agent.
func TestCatalogLoadsAGroupThroughANode(t *testing.T) {
	dir := t.TempDir()
	rec := &requestLog{}
	cfg := node.Config{DataDir: dir, Tools: serverTools(), Disclosure: disclosure.Catalog,
		Model: rec.model(t, call("c1", "load_tools", `{"group":"mcp:tickets"}`), call("c2", "tickets_open", `{"id":"7"}`), llm.ScriptStep{Content: "opened"})}
	n, stop := nodetest.StartWithStop(t, cfg)
	events := nodetest.Run(t, n, "catalog", "open ticket 7")
	stop()
	sections, names, system := rec.get()
	want := []string{"calculator,load_tools", "calculator,load_tools,tickets_close,tickets_open", "calculator,load_tools,tickets_close,tickets_open"}
	if strings.Join(names, " | ") != strings.Join(want, " | ") {
		t.Fatalf("requests offered:\n%s\nwant:\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
	if sections[1] != sections[2] {
		t.Errorf("the tool section changed between steps:\n%s\n%s", sections[1], sections[2])
	}
	if !strings.Contains(system[0], "- mcp:tickets (2 tools): tickets_close, tickets_open\n- mcp:weather (1 tools): weather_forecast") {
		t.Errorf("system prompt:\n%s", system[0])
	}
	if r := toolResults(t, events)["c2"]; r.Result != `tickets_open ran with {"id":"7"}` {
		t.Errorf("tickets_open = %+v", r)
	}
	agent, err := cfg.Agent()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := actors.Verify(agent, events); err != nil || div != nil {
		t.Fatalf("verify: %v %v", div, err)
	}

	// A new node on the same log: the session's loaded set is refolded from its events.
	rec2 := &requestLog{}
	cfg.Model = rec2.model(t, llm.ScriptStep{Content: "still here"})
	again := nodetest.Start(t, cfg)
	nodetest.Run(t, again, "catalog", "anything else?")
	_, names2, _ := rec2.get()
	if len(names2) != 1 || names2[0] != want[1] {
		t.Fatalf("after a restart the session offers %v, want %s", names2, want[1])
	}
	// And a fresh session on it starts from the builtins again.
	rec3 := &requestLog{}
	cfg.Model, cfg.DataDir = rec3.model(t, llm.ScriptStep{Content: "hi"}), t.TempDir()
	fresh := nodetest.Start(t, cfg)
	nodetest.Run(t, fresh, "other", "hello")
	if _, names3, _ := rec3.get(); len(names3) != 1 || names3[0] != want[0] {
		t.Errorf("a new session offers %v", names3)
	}
}

// Under search, the model sees search_tools and call_tool; the tool a search finds
// joins the next request, call_tool runs a tool of the catalog and refuses a name
// outside it, and a call of a not-yet-loaded catalog tool still runs.
func TestSearchThroughANode(t *testing.T) {
	rec := &requestLog{}
	cfg := node.Config{Tools: serverTools(), Disclosure: disclosure.Search,
		Model: rec.model(t,
			call("s1", "search_tools", `{"query":"weather forecast","limit":1}`),
			call("s2", "call_tool", `{"name":"weather_forecast","arguments":{"id":"paris"}}`),
			call("s3", "call_tool", `{"name":"launch_missiles","arguments":{}}`),
			call("s4", "tickets_close", `{"id":"1"}`),
			llm.ScriptStep{Content: "sunny"})}
	n := nodetest.Start(t, cfg)
	events := nodetest.Run(t, n, "search", "weather in paris?")
	sections, names, system := rec.get()
	if names[0] != "calculator,call_tool,search_tools" || names[1] != "calculator,call_tool,search_tools,weather_forecast" {
		t.Fatalf("requests offered %v", names)
	}
	for i := 2; i < len(sections); i++ {
		if sections[i] != sections[1] {
			t.Errorf("request %d's tool section differs from request 2's", i+1)
		}
	}
	if !strings.Contains(system[0], "3 more tools are available (from mcp:tickets, mcp:weather)") {
		t.Errorf("system prompt:\n%s", system[0])
	}
	res := toolResults(t, events)
	if r := res["s1"]; r.Error != "" || !strings.Contains(r.Result, `"loaded":["weather_forecast"]`) {
		t.Errorf("search_tools = %+v", r)
	}
	if r := res["s2"]; r.Result != `weather_forecast ran with {"id":"paris"}` {
		t.Errorf("call_tool = %+v", r)
	}
	if r := res["s3"]; !strings.Contains(r.Error, `"launch_missiles" is not a tool of this agent`) {
		t.Errorf("call_tool outside the catalog = %+v", r)
	}
	if r := res["s4"]; r.Result != `tickets_close ran with {"id":"1"}` {
		t.Errorf("a catalog tool called before it was loaded = %+v", r)
	}
}

// The default strategy offers every tool in every request, as before.
func TestAllOffersEveryToolThroughANode(t *testing.T) {
	rec := &requestLog{}
	n := nodetest.Start(t, node.Config{Tools: serverTools(), Model: rec.model(t, llm.ScriptStep{Content: "ok"})})
	nodetest.Run(t, n, "all", "hi")
	if _, names, system := rec.get(); names[0] != "calculator,tickets_close,tickets_open,weather_forecast" || system[0] != node.DefaultSystemPrompt {
		t.Errorf("offered %v, system %q", names, system)
	}
}

// Skills reach the model in three levels through a node: names and descriptions in
// the system prompt, the body through load_skill, a file through read_skill_file; a
// script is refused unless allowed.
func TestSkillsThroughANode(t *testing.T) {
	dir := t.TempDir()
	for rel, content := range map[string]string{
		"haiku/SKILL.md":            "---\nname: haiku\ndescription: Write haiku in the house style.\n---\nCount syllables: 5, 7, 5. See references/style.md.\n",
		"haiku/references/style.md": "No rhymes.\n",
		"haiku/scripts/count.sh":    "echo 17\n",
	} {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set, problems, err := skills.Load(skills.Config{Dir: dir})
	if err != nil || len(problems) > 0 {
		t.Fatal(err, problems)
	}
	rec := &requestLog{}
	n := nodetest.Start(t, node.Config{Skills: set, Disclosure: disclosure.Catalog, Model: rec.model(t,
		call("k1", "load_skill", `{"name":"haiku"}`),
		call("k2", "read_skill_file", `{"skill":"haiku","path":"references/style.md"}`),
		call("k3", "run_skill_script", `{"skill":"haiku","script":"scripts/count.sh"}`),
		call("k4", "read_skill_file", `{"skill":"haiku","path":"../../etc/passwd"}`),
		llm.ScriptStep{Content: "an old pond"})})
	events := nodetest.Run(t, n, "skills", "write a haiku")
	_, names, system := rec.get()
	if !strings.Contains(system[0], "## Skills") || !strings.Contains(system[0], "- haiku: Write haiku in the house style.") || strings.Contains(system[0], "syllables") {
		t.Errorf("system prompt:\n%s", system[0])
	}
	// The skill tools are always offered, whatever the disclosure strategy.
	if names[0] != "calculator,clock,load_skill,load_tools,read_skill_file,run_skill_script" {
		t.Errorf("offered %s", names[0])
	}
	res := toolResults(t, events)
	if r := res["k1"]; !strings.Contains(r.Result, "Count syllables: 5, 7, 5.") || !strings.Contains(r.Result, "- references/style.md") {
		t.Errorf("load_skill = %+v", r)
	}
	if r := res["k2"]; r.Result != "No rhymes.\n" {
		t.Errorf("read_skill_file = %+v", r)
	}
	if r := res["k3"]; !strings.Contains(r.Error, "running skill scripts is disabled") {
		t.Errorf("run_skill_script = %+v", r)
	}
	if r := res["k4"]; !strings.Contains(r.Error, "leaves the skill's folder") {
		t.Errorf("read_skill_file outside = %+v", r)
	}
}
