package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

func runAgents(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"agents"}, args...), &out, &errb, options{})
	return code, out.String(), errb.String()
}

func writeAgents(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agents.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// node agents list prints the example file's agents, as a table and as JSON, from
// --agents or from the configuration's agents_file.
func TestAgentsList(t *testing.T) {
	example := filepath.Join("..", "..", "examples", "agents.yaml")
	code, out, errOut := runAgents(t, "list", "--agents", example)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "NAME") ||
		!strings.Contains(lines[3], "calculator") || !strings.Contains(lines[3], "react") || !strings.Contains(lines[3], "calculator,clock") ||
		!strings.Contains(lines[2], "(all)") || !strings.Contains(lines[4], "(none)") ||
		!strings.HasPrefix(lines[1], "arithmetic") || !strings.Contains(lines[1], " offline ") {
		t.Errorf("list =\n%s", out)
	}
	cfg := writeConfig(t, `{"agents_file": "`+example+`"}`)
	code, out, errOut = runAgents(t, "list", "--json", "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got []struct {
		Name, Paradigm string
		Tools          []string
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got) != 4 || got[2].Name != "calculator" || got[2].Paradigm != "react" || strings.Join(got[2].Tools, ",") != "calculator,clock" ||
		got[3].Tools == nil || len(got[3].Tools) != 0 {
		t.Errorf("list --json = %s", out)
	}
}

// A bad file, an unknown tool and a missing file exit 2 with the reason (and the line).
func TestAgentsListErrors(t *testing.T) {
	for _, c := range []struct{ name, file, want string }{
		{"unknown tool", "agents:\n  a:\n    tools: [calculator, shell]\n", `line 3: agent "a": unknown tool "shell"`},
		{"unknown field", "agents:\n  a:\n    tmperature: 1\n", `line 3: agent "a": unknown field "tmperature"`},
		{"paradigm", "agents:\n  a:\n    paradigm: chaos\n", `line 3: agent "a": unknown paradigm "chaos"`},
		{"reflexion without memory", "agents:\n  a:\n    paradigm: reflexion\n", `line 3: agent "a": the reflexion paradigm keeps its lessons with the memory tool, which this node does not have`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runAgents(t, "list", "--agents", writeAgents(t, c.file))
			if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
				t.Errorf("exit %d, out %q, err %q; want 2 and %q", code, out, errOut, c.want)
			}
		})
	}
	if code, _, errOut := runAgents(t, "list"); code != 2 || !strings.Contains(errOut, "no agents file") {
		t.Errorf("list without a file: exit %d, %q", code, errOut)
	}
	if code, _, _ := runAgents(t, "show"); code != 2 {
		t.Errorf("agents show: exit %d, want 2", code)
	}
}

// requestLog keeps the requests a model gets.
type requestLog struct {
	llm.Model
	mu   sync.Mutex
	reqs []llm.Request
}

func (m *requestLog) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, r)
	m.mu.Unlock()
	return m.Model.Generate(ctx, r)
}

func writeScript(t *testing.T, steps ...llm.ScriptStep) string {
	t.Helper()
	b, err := json.Marshal(llm.Script{Name: "scripted", Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const testAgents = `agents:
  calc:
    system_prompt: You only compute.
    tools: [calculator]
    max_steps: 3
  thinker:
    paradigm: react
    system_prompt: You think aloud.
    tools: [calculator]
`

// node run --agent NAME runs the task with that agent's system prompt, tools and
// paradigm: the model is offered the calculator only, natively for a
// function-calling agent and through the ReAct text protocol for a react one (the
// scripted model has native tools), and the session records the agent's name.
func TestRunWithAgent(t *testing.T) {
	agents := writeAgents(t, testAgents)
	for _, c := range []struct {
		agent string
		steps []llm.ScriptStep
	}{
		{"calc", []llm.ScriptStep{
			{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"2+3"}`}}},
			{Content: "5"},
		}},
		{"thinker", []llm.ScriptStep{
			{Content: "Thought: add\nAction: calculator[{\"expression\": \"2+3\"}]"},
			{Content: "Thought: done\nFinish[5]"},
		}},
	} {
		t.Run(c.agent, func(t *testing.T) {
			data := t.TempDir()
			rec := &requestLog{}
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"run", "--data", data, "--agents", agents, "--agent", c.agent, "--model", "scripted:" + writeScript(t, c.steps...), "what is 2+3?"},
				&out, &errb, options{wrapModel: func(m llm.Model) llm.Model { rec.Model = m; return rec }})
			if code != 0 || !strings.Contains(out.String(), "answer: 5") {
				t.Fatalf("run: exit %d\n%s\n%s", code, out.String(), errb.String())
			}
			if len(rec.reqs) != 2 {
				t.Fatalf("the model got %d requests, want 2", len(rec.reqs))
			}
			first := rec.reqs[0]
			system := first.Messages[0]
			if system.Role != messages.RoleSystem {
				t.Fatalf("first message %+v is not the system prompt", system)
			}
			switch c.agent {
			case "calc":
				if !strings.HasPrefix(system.Content, "You only compute.") || len(first.Tools) != 1 || first.Tools[0].Name != "calculator" || first.Protocol != "" {
					t.Errorf("calc's request: system %q, tools %+v, protocol %q", system.Content, first.Tools, first.Protocol)
				}
			case "thinker":
				if !strings.HasPrefix(system.Content, "You think aloud.") || !strings.Contains(system.Content, "- calculator:") ||
					strings.Contains(system.Content, "- clock:") || len(first.Tools) != 0 {
					t.Errorf("thinker's request is not the text protocol over the calculator: system %q, tools %+v", system.Content, first.Tools)
				}
			}
			id := strings.Fields(out.String())[1]
			var submitted *messages.TaskSubmitted
			for _, e := range readSession(t, data, id) {
				if e.Type == messages.TypeTaskSubmitted {
					p, _ := e.Decode()
					submitted = p.(*messages.TaskSubmitted)
				}
			}
			if submitted == nil || submitted.Agent != c.agent {
				t.Errorf("task.submitted = %+v, want agent %q", submitted, c.agent)
			}
		})
	}
}

// An unknown agent, or a bad agents file, exits 2 before anything is written: no
// data directory.
func TestRunUnknownAgent(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown", []string{"--agents", writeAgents(t, testAgents), "--agent", "nope"}, `unknown agent "nope": the agents are default, calc, thinker`},
		{"no file", []string{"--agent", "calc"}, `unknown agent "calc": the agents are default`},
		{"bad file", []string{"--agents", writeAgents(t, "agents:\n  calc:\n    tools: [shell]\n")}, `line 3: agent "calc": unknown tool "shell"`},
		{"bad yaml", []string{"--agents", writeAgents(t, "agents:\n  calc:\n    tool: [calculator]\n")}, `line 3: agent "calc": unknown field "tool"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			var out, errb bytes.Buffer
			args := append(append([]string{"run", "--data", data, "--model", "offline"}, c.args...), "1+1")
			if code := run(context.Background(), args, &out, &errb, options{}); code != 2 || !strings.Contains(errb.String(), c.want) {
				t.Errorf("exit %d, %q; want 2 and %q", code, errb.String(), c.want)
			}
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Errorf("the data directory exists after a refused run: %v", err)
			}
		})
	}
}

// examples/subagents.yaml runs offline: the lead delegates to the mathematician,
// whose answer is the lead's tool result and answer; node run names the child
// session it ran in.
func TestRunSubagentsExample(t *testing.T) {
	t.Setenv("TROUPE_AGENTS", "")
	example := filepath.Join("..", "..", "examples", "subagents.yaml")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--data", t.TempDir(), "--model", "offline", "--agents", example, "--agent", "lead",
		"delegate to mathematician: What is 12 * (7 + 5)?"}, &out, &errb, options{})
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	child := sessionOf(t, out.String()) + ".sub4"
	if !strings.Contains(out.String(), "tool delegate → 144 (child session "+child+", ") || !strings.Contains(out.String(), "\nanswer: 144\n") {
		t.Errorf("node run:\n%s", out.String())
	}
}

// namedScript writes a script of steps named name and returns its path.
func namedScript(t *testing.T, name string, steps ...llm.ScriptStep) string {
	t.Helper()
	b, err := json.Marshal(llm.Script{Name: name, Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+".json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// node agents list shows each agent's model and fallbacks, memory namespace and
// expanded tools (skill:NAME as the skill tools); --json has them too.
func TestAgentsListShowsModelsMemoryAndTools(t *testing.T) {
	clearLLMEnv(t)
	skillsDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(skillsDir, "pdf"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(skillsDir, "pdf", "SKILL.md"), []byte("---\nname: pdf\ndescription: Reads PDFs.\n---\nRead.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	script := namedScript(t, "alpha", llm.ScriptStep{Content: "a"})
	agents := writeAgents(t, "agents:\n"+
		"  reader:\n    model: scripted:"+script+"\n    fallbacks: [offline]\n    memory: agent:reader\n    tools: [calculator, \"skill:pdf\"]\n"+
		"  plain:\n    description: The node's.\n")
	cfg := writeConfig(t, `{"memory": {"tool": true}, "skills_dir": `+strconvQuote(skillsDir)+`}`)
	code, out, errOut := runAgents(t, "list", "--agents", agents, "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "MODEL") || !strings.Contains(lines[0], "FALLBACKS") || !strings.Contains(lines[0], "MEMORY") {
		t.Fatalf("list =\n%s", out)
	}
	for _, want := range []string{"scripted:" + script, "offline", "agent:reader", "calculator,load_skill,read_skill_file,run_skill_script"} {
		if !strings.Contains(lines[2], want) {
			t.Errorf("reader's line %q lacks %q", lines[2], want)
		}
	}
	if f := strings.Fields(lines[1]); len(f) < 6 || f[0] != "plain" || f[2] != "(node's)" || f[3] != "-" || f[4] != "(node's)" || f[5] != "(all)" {
		t.Errorf("plain's line %q", lines[1])
	}
	code, out, errOut = runAgents(t, "list", "--json", "--agents", agents, "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got []struct {
		Name, Model     string
		Fallbacks       []string
		MemoryNamespace string   `json:"memory_namespace"`
		DeclaredTools   []string `json:"declared_tools"`
		Tools           []string
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	r := got[1]
	if len(got) != 2 || r.Name != "reader" || r.Model != "scripted:"+script || strings.Join(r.Fallbacks, ",") != "offline" ||
		r.MemoryNamespace != "agent:reader" || strings.Join(r.DeclaredTools, ",") != "calculator,skill:pdf" ||
		strings.Join(r.Tools, ",") != "calculator,load_skill,read_skill_file,run_skill_script" || got[0].Tools != nil {
		t.Errorf("list --json = %s", out)
	}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// An agent's model the node cannot reach, an unknown skill or MCP server, and a memory
// namespace without the memory tool exit 2 with the line, before anything starts.
func TestAgentsFileErrorsAtStartup(t *testing.T) {
	clearLLMEnv(t)
	for _, c := range []struct{ name, file, want string }{
		{"provider without its key", "agents:\n  a:\n    model: deepseek\n", `line 3: agent "a": model "deepseek" cannot be reached`},
		{"fallback without its key", "agents:\n  a:\n    model: offline\n    fallbacks:\n      - openai:gpt-4o-mini\n", `line 5: agent "a": model "openai:gpt-4o-mini" cannot be reached`},
		{"missing script", "agents:\n  a:\n    model: scripted:/nonexistent.json\n", `line 3: agent "a": model "scripted:/nonexistent.json" cannot be reached`},
		{"unknown skill", "agents:\n  a:\n    tools: [\"skill:pdf\"]\n", `line 3: agent "a": unknown skill "pdf"`},
		{"unknown server", "agents:\n  a:\n    tools:\n      - calculator\n      - mcp:github\n", `line 5: agent "a": unknown MCP server "github"`},
		{"memory without the tool", "agents:\n  a:\n    memory: agent:a\n", `line 3: agent "a": memory agent:a: the node has no memory tool`},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"run", "--data", data, "--model", "offline", "--agents", writeAgents(t, c.file), "hi"}, &out, &errb, options{})
			if code != 2 || !strings.Contains(errb.String(), c.want) {
				t.Errorf("run: exit %d, %q; want 2 and %q", code, errb.String(), c.want)
			}
			if _, err := os.Stat(data); err == nil {
				t.Error("the data directory was made")
			}
			if code, _, errOut := runAgents(t, "list", "--agents", writeAgents(t, c.file)); code != 2 || !strings.Contains(errOut, c.want) {
				t.Errorf("list: exit %d, %q; want 2 and %q", code, errOut, c.want)
			}
		})
	}
}

// node run runs a task of an agent with its own model, and of one whose model
// fails, with its fallback; the session records which model each call asked for and
// which answered. The node's own agent keeps the node's model.
func TestRunAgentWithItsOwnModel(t *testing.T) {
	clearLLMEnv(t)
	add := llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"2+3"}`}}}
	short := namedScript(t, "short", add) // no second step: its second call fails
	long := namedScript(t, "long", add, llm.ScriptStep{Content: "5 from long"})
	agents := writeAgents(t, "agents:\n  calc:\n    model: scripted:"+long+"\n    tools: [calculator]\n"+
		"  second:\n    model: scripted:"+short+"\n    fallbacks: [\"scripted:"+long+"\"]\n    tools: [calculator]\n")
	data := t.TempDir()
	for _, c := range []struct{ agent, input, want, requested, responded string }{
		{"calc", "what is 2+3?", "answer: 5 from long", "long,long", "long,long"},
		{"second", "what is 2+3?", "answer: 5 from long", "short,short", "short,long"},
		{"default", "hello", "answer:", "offline", "offline"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"run", "--data", data, "--model", "offline", "--agents", agents, "--agent", c.agent, c.input}, &out, &errb, options{})
		if code != 0 || !strings.Contains(out.String(), c.want) {
			t.Fatalf("run %s: exit %d\n%s\n%s", c.agent, code, out.String(), errb.String())
		}
		if first := strings.SplitN(out.String(), "\n", 2)[0]; !strings.Contains(first, "(model: "+strings.Split(c.requested, ",")[0]+" ") {
			t.Errorf("%s: the first line %q does not name the model %s", c.agent, first, c.requested)
		}
		id := strings.Fields(out.String())[1]
		var requested, responded []string
		for _, e := range readSession(t, data, id) {
			p, _ := e.Decode()
			switch p := p.(type) {
			case *messages.ModelRequested:
				requested = append(requested, p.Model)
			case *messages.ModelResponded:
				responded = append(responded, p.Model)
			}
		}
		if strings.Join(requested, ",") != c.requested || strings.Join(responded, ",") != c.responded {
			t.Errorf("%s: requested %v, responded %v; want %s and %s", c.agent, requested, responded, c.requested, c.responded)
		}
	}
}

// Every agent of examples/agents.yaml runs on a fresh machine with the node's
// default model (the offline one, without a key): the calculator agent too, whose
// react paradigm speaks the text protocol to it.
func TestRunAgentsExampleOffline(t *testing.T) {
	clearLLMEnv(t)
	t.Setenv("TROUPE_AGENTS", "")
	example := filepath.Join("..", "..", "examples", "agents.yaml")
	for _, agent := range []string{"assistant", "arithmetic", "calculator", "writer"} {
		t.Run(agent, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"run", "--data", t.TempDir(), "--agents", example, "--agent", agent,
				"What is 12 * (7 + 5)?"}, &out, &errb, options{})
			if code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
			}
			want := "\nanswer: 144\n"
			if agent == "writer" { // simple: one call, no tools, so no calculator
				want = "\nanswer: "
			}
			if !strings.Contains(out.String(), want) {
				t.Errorf("node run --agent %s:\n%s", agent, out.String())
			}
		})
	}
}
