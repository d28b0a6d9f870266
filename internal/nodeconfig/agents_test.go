package nodeconfig

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools/skills"
)

const goodAgents = `# two agents
agents:
  researcher:
    description: Finds and checks facts.
    system_prompt: You research.
    paradigm: react
    tools: [calculator, clock, "mcp:github", "skill:pdf"]
    max_steps: 8
    model: openai:gpt-4o-mini
    fallbacks:
      - deepseek
      - offline
    memory: agent:researcher
  assistant:
    system_prompt: |
      You help.
`

func TestParseAgents(t *testing.T) {
	f, err := ParseAgents("agents.yaml", []byte(goodAgents))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Agents) != 2 || f.Agents[0].Name != "assistant" || f.Agents[1].Name != "researcher" {
		t.Fatalf("agents = %+v, want assistant and researcher, sorted", f.Agents)
	}
	a, b := f.Agents[0], f.Agents[1]
	if a.Paradigm != "function_calling" || a.Tools != nil || a.SystemPrompt != "You help.\n" || a.Line != 14 ||
		a.Model != "" || a.Fallbacks != nil || a.Memory != "" {
		t.Errorf("assistant = %+v", a)
	}
	if b.Paradigm != "react" || strings.Join(b.Tools, ",") != "calculator,clock,mcp:github,skill:pdf" || b.MaxSteps != 8 ||
		b.Description != "Finds and checks facts." || b.Line != 3 || b.Model != "openai:gpt-4o-mini" ||
		strings.Join(b.Fallbacks, ",") != "deepseek,offline" || b.Memory != "agent:researcher" {
		t.Errorf("researcher = %+v", b)
	}
	if _, ok := f.Lookup("researcher"); !ok {
		t.Error("Lookup(researcher) found nothing")
	}
	if err := f.CheckTools([]string{"calculator", "clock"}); err != nil {
		t.Error(err)
	}
	err = f.CheckTools([]string{"calculator"})
	var fe *AgentsFileError
	if !errors.As(err, &fe) || fe.Line != 7 || !strings.Contains(err.Error(), `unknown tool "clock"`) {
		t.Errorf("CheckTools without clock = %v, want unknown tool \"clock\" at line 8", err)
	}
}

func TestParsePlanExecuteSettings(t *testing.T) {
	f, err := ParseAgents("agents.yaml", []byte("agents:\n  planner:\n    paradigm: plan_execute\n    settings:\n      concurrency: 8\n      max_plan_steps: 12\n      max_replans: 3\n      executor: default\n"))
	if err != nil {
		t.Fatal(err)
	}
	na := f.NodeAgents()[0]
	if na.Paradigm != "plan_execute" || na.PlanExecute.Concurrency != 8 || na.PlanExecute.MaxPlanSteps != 12 || na.PlanExecute.MaxReplans != 3 || na.PlanExecute.Executor != "default" {
		t.Fatalf("planner = %+v", na)
	}
}

func TestParseAgentsErrors(t *testing.T) {
	for _, c := range []struct {
		name, file string
		line       int
		want       string
	}{
		{"empty", "  \n", 0, "empty"},
		{"malformed", "agents:\n  a:\n    paradigm: react\n  model: offline: x\n", 4, "not valid YAML"},
		{"unclosed quote", "agents:\n  a:\n    system_prompt: \"hi\n", 3, "not valid YAML"},
		{"not a mapping", "- a\n", 1, `want a mapping with the key "agents"`},
		{"unknown top field", "agents:\n  a: {}\nworkflows: {}\n", 3, `unknown field "workflows"`},
		{"no agents", "agents: {}\n", 1, "at least one"},
		{"bad name", "agents:\n  Bad Name:\n    paradigm: react\n", 2, `agent name "Bad Name"`},
		{"unknown field", "agents:\n  a:\n    system_prompt: hi\n    temperature: 1\n", 4, `unknown field "temperature"`},
		{"settings of another paradigm", "agents:\n  a:\n    settings: {concurrency: 2}\n", 3, "settings is a setting of the plan_execute paradigm, and this agent's is function_calling"},
		{"unknown setting", "agents:\n  a:\n    paradigm: plan_execute\n    settings:\n      parallelism: 2\n", 5, `unknown setting "parallelism"`},
		// A reflection agent's setting put under settings: the paradigm is the mistake, not the plan's setting names.
		{"settings on a reflection agent", "agents:\n  a:\n    paradigm: reflection\n    settings:\n      max_rounds: 3\n", 4, "settings is a setting of the plan_execute paradigm, and this agent's is reflection"},
		{"concurrency", "agents:\n  a:\n    paradigm: plan_execute\n    settings:\n      concurrency: 0\n", 5, "concurrency \"0\": want an integer from 1 to 64"},
		{"own executor", "agents:\n  a:\n    paradigm: plan_execute\n    settings: {executor: a}\n", 4, "its own executor"},
		{"unknown paradigm", "agents:\n  a:\n    paradigm: chaos\n", 3, `unknown paradigm "chaos"`},
		{"max steps", "agents:\n  a:\n    max_steps: 0\n", 3, "max_steps"},
		{"max steps string", "agents:\n  a:\n    max_steps: many\n", 3, "max_steps"},
		{"tools not a list", "agents:\n  a:\n    tools: calculator\n", 3, "want a list"},
		{"tool twice", "agents:\n  a:\n    tools:\n      - clock\n      - clock\n", 5, "listed twice"},
		{"model not a string", "agents:\n  a:\n    model: [offline]\n", 3, "model: want a string"},
		{"model auto", "agents:\n  a:\n    model: auto\n", 3, `model "auto": name a model`},
		{"model unknown provider", "agents:\n  a:\n    description: x\n    model: gpt5\n", 4, `"gpt5" is not a model spec`},
		{"model no script", "agents:\n  a:\n    model: \"scripted:\"\n", 3, "needs the path of a script file"},
		{"fallbacks not a list", "agents:\n  a:\n    model: offline\n    fallbacks: offline\n", 4, "fallbacks: want a list"},
		{"fallbacks empty", "agents:\n  a:\n    model: offline\n    fallbacks: []\n", 4, "with at least one"},
		{"fallback bad", "agents:\n  a:\n    model: offline\n    fallbacks:\n      - deepseek\n      - nowhere:x\n", 6, `fallback "nowhere:x" is not a model spec`},
		{"fallback twice", "agents:\n  a:\n    model: offline\n    fallbacks: [deepseek, deepseek]\n", 4, `fallback "deepseek" is listed twice`},
		{"fallbacks without model", "agents:\n  a:\n    fallbacks: [deepseek]\n", 2, "fallbacks without model"},
		{"memory mapping", "agents:\n  a:\n    memory: {namespace: agent:a}\n", 3, "memory: want a namespace"},
		{"memory bad namespace", "agents:\n  a:\n    memory: \"agent a\"\n", 3, "memory:"},
		{"memory null", "agents:\n  a:\n    memory:\n", 3, "memory: want a string"},
		{"mcp without server", "agents:\n  a:\n    tools: [clock, \"mcp:\"]\n", 3, `tool "mcp:": want mcp:NAME`},
		{"skill without name", "agents:\n  a:\n    tools:\n      - clock\n      - \"skill: \"\n", 5, `tool "skill: ": want skill:NAME`},
		{"default", "agents:\n  default: {}\n", 2, `"default" is the node's own agent`},
		{"duplicate agent", "agents:\n  a: {}\n  a: {}\n", 3, "declared twice"},
		{"duplicate field", "agents:\n  a:\n    paradigm: react\n    paradigm: react\n", 4, "given twice"},
		{"prompt not a string", "agents:\n  a:\n    system_prompt: [x]\n", 3, "system_prompt: want a string"},
		{"agent not a mapping", "agents:\n  a: react\n", 2, "want a mapping of its fields"},
		{"max rounds", "agents:\n  a:\n    paradigm: reflection\n    max_rounds: 11\n", 4, "max_rounds \"11\": want an integer from 1 to 10"},
		{"critic model", "agents:\n  a:\n    paradigm: reflection\n    critic_model: auto\n", 4, "critic_model "},
		{"critic model elsewhere", "agents:\n  a:\n    critic_model: offline\n", 3, "critic_model is a setting of the reflection paradigm"},
		{"reflection setting elsewhere", "agents:\n  a:\n    critic_prompt: Be harsh.\n    paradigm: react\n", 3, "critic_prompt is a setting of the reflection paradigm, and this agent's is react"},
		{"reflexion setting elsewhere", "agents:\n  a:\n    paradigm: reflection\n    evaluate: false\n", 4, "evaluate is a setting of the reflexion paradigm"},
		{"lessons namespace", "agents:\n  a:\n    paradigm: reflexion\n    lessons_namespace: lessons/a\n", 4, "lessons_namespace"},
		{"evaluate not a bool", "agents:\n  a:\n    paradigm: reflexion\n    evaluate: sometimes\n", 4, "want true or false"},
		{"tool mapping without name", "agents:\n  a:\n    tools:\n      - {approval: required}\n", 4, "needs its name"},
		{"tool approval value", "agents:\n  a:\n    tools:\n      - name: mail\n        approval: maybe\n", 5, `approval "maybe": want required or none`},
		{"tool unknown field", "agents:\n  a:\n    tools:\n      - {name: mail, retries: 3}\n", 4, `unknown field "retries" of a tool`},
		{"tool field twice", "agents:\n  a:\n    tools:\n      - name: mail\n        name: post\n", 5, `field "name" is given twice`},
		{"tool name not a string", "agents:\n  a:\n    tools:\n      - {name: [mail]}\n", 4, "name: want a string"},
		{"tool mapping twice", "agents:\n  a:\n    tools:\n      - mail\n      - {name: mail, approval: required}\n", 5, "listed twice"},
		{"approval timeout", "agents:\n  a:\n    approval_timeout: soon\n", 3, "approval_timeout \"soon\""},
		{"approval timeout negative", "agents:\n  a:\n    approval_timeout: -1m\n", 3, "approval_timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseAgents("agents.yaml", []byte(c.file))
			var fe *AgentsFileError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want an AgentsFileError", err)
			}
			if fe.Line != c.line || !strings.Contains(fe.Msg, c.want) {
				t.Errorf("err = %v, want line %d and %q", err, c.line, c.want)
			}
			if c.line > 0 && !strings.Contains(err.Error(), "agents.yaml: line ") {
				t.Errorf("err = %v does not name the file and line", err)
			}
		})
	}
}

// writeScript writes a one-step script named name and returns its path.
func writeScript(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".json")
	if err := os.WriteFile(path, []byte(`{"name": "`+name+`", "steps": [{"content": "from `+name+`"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The agents' models are resolved before the node starts: a spec the node runs is
// its model, another is resolved as a --fallback (a provider's own key only), and
// what cannot be reached is an error at its line.
func TestResolveModels(t *testing.T) {
	a, b := writeScript(t, "alpha"), writeScript(t, "beta")
	file := "agents:\n" +
		"  one:\n    model: scripted:" + a + "\n    fallbacks: [offline]\n" +
		"  two:\n    model: scripted:" + b + "\n" +
		"  three:\n    model: deepseek:deepseek-chat\n" +
		"  four:\n    tools: [clock]\n"
	f, err := ParseAgents("agents.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	node := llm.Offline{}
	// Without DEEPSEEK_API_KEY, agent three's model cannot be reached, even with the
	// user's own key and base URL in the environment: they are the node's model's.
	env := map[string]string{"LLM_API_KEY": "sk-user", "LLM_BASE_URL": "https://proxy.example/v1", "DEEPSEEK_API_KEY": ""}
	_, err = f.ResolveModels(context.Background(), map[string]llm.Model{"offline": node}, func(k string) string { return env[k] })
	var fe *AgentsFileError
	if !errors.As(err, &fe) || fe.Line != 8 || !strings.Contains(err.Error(), `agent "three": model "deepseek:deepseek-chat" cannot be reached`) ||
		strings.Contains(err.Error(), "sk-user") {
		t.Fatalf("ResolveModels without the provider's key = %v, want an error at line 8", err)
	}
	env["DEEPSEEK_API_KEY"] = "sk-deepseek"
	keys, err := f.ResolveModels(context.Background(), map[string]llm.Model{"offline": node}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, ",") != "sk-deepseek" {
		t.Errorf("keys = %q, want the provider's own key only", keys)
	}
	byName := map[string]int{}
	agents := f.NodeAgents()
	for i, na := range agents {
		byName[na.Name] = i
	}
	one, two, three, four := agents[byName["one"]], agents[byName["two"]], agents[byName["three"]], agents[byName["four"]]
	if one.Model == nil || one.Model.Name() != "alpha" || len(one.Fallbacks) != 1 || one.Fallbacks[0] != llm.Model(node) {
		t.Errorf("one = %+v, want alpha, then the node's offline model", one)
	}
	if two.Model == nil || two.Model.Name() != "beta" || two.Fallbacks != nil {
		t.Errorf("two = %+v", two)
	}
	if three.Model == nil || three.Model.Name() != "deepseek-chat" {
		t.Errorf("three = %+v", three)
	}
	if p, ok := three.Model.(interface{ Provider() string }); !ok || p.Provider() != "deepseek" {
		t.Errorf("three's model is not deepseek's: %T", three.Model)
	}
	if four.Model != nil || strings.Join(four.Tools, ",") != "clock" {
		t.Errorf("four = %+v, want the node's model", four)
	}

	for _, c := range []struct {
		name, file string
		line       int
		want       string
	}{
		{"two models of one name", "agents:\n  one:\n    model: scripted:" + a + "\n  two:\n    model: scripted:" + writeScript(t, "alpha") + "\n", 5, `is named "alpha", as model`},
		{"fallback is the model", "agents:\n  one:\n    model: offline\n    fallbacks: [\"scripted:" + writeScript(t, "offline") + "\"]\n", 4, `is named "offline"`},
		{"script missing", "agents:\n  one:\n    model: scripted:/nonexistent/script.json\n", 3, "cannot be reached"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := ParseAgents("agents.yaml", []byte(c.file))
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.ResolveModels(context.Background(), nil, func(string) string { return "" })
			var fe *AgentsFileError
			if !errors.As(err, &fe) || fe.Line != c.line || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want line %d and %q", err, c.line, c.want)
			}
		})
	}
}

// Tools entries mcp:SERVER and skill:NAME name a configured server and skill; a
// memory namespace needs the node's memory tool; each error is at its line.
func TestCheckNodeToolGroups(t *testing.T) {
	skillsDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(skillsDir, "pdf"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(skillsDir, "pdf", "SKILL.md"), []byte("---\nname: pdf\ndescription: Reads PDFs.\n---\nRead them.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	set, _, err := skills.Load(skills.Config{Dir: skillsDir})
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{Skills: set}
	for _, c := range []struct {
		name, file string
		line       int
		want       string
	}{
		{"unknown skill", "agents:\n  a:\n    tools:\n      - clock\n      - skill:docx\n", 5, `unknown skill "docx" in "skill:docx"`},
		{"unknown server", "agents:\n  a:\n    tools: [\"mcp:github\"]\n", 3, `unknown MCP server "github"`},
		{"memory without the tool", "agents:\n  a:\n    description: d\n    memory: agent:a\n", 4, `memory agent:a: the node has no memory tool`},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := ParseAgents("agents.yaml", []byte(c.file))
			if err != nil {
				t.Fatal(err)
			}
			err = f.CheckNodeTools(cfg)
			var fe *AgentsFileError
			if !errors.As(err, &fe) || fe.Line != c.line || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want line %d and %q", err, c.line, c.want)
			}
		})
	}
	f, err := ParseAgents("agents.yaml", []byte("agents:\n  a:\n    tools: [clock, \"skill:pdf\"]\n    memory: agent:a\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MemoryTool = &memory.ToolConfig{Namespace: "agent:default"}
	if err := f.CheckNodeTools(cfg); err != nil {
		t.Fatal(err)
	}
	na := f.NodeAgents()[0]
	if strings.Join(na.Tools, ",") != "clock" || strings.Join(na.Skills, ",") != "pdf" || na.MCPServers != nil || na.MemoryNamespace != "agent:a" {
		t.Errorf("NodeAgents = %+v", na)
	}
}

// Reflection's and reflexion's settings reach the node's agents; reflexion
// evaluates unless told not to, and needs the node's memory tool among its tools.
func TestParseParadigmSettings(t *testing.T) {
	f, err := ParseAgents("agents.yaml", []byte("agents:\n"+
		"  critic:\n    paradigm: reflection\n    max_rounds: 3\n    critic_prompt: Check the figures.\n    critic_model: offline\n"+
		"  learner:\n    paradigm: reflexion\n    lessons: 2\n    evaluator_prompt: Cite.\n"+
		"  quiet:\n    paradigm: reflexion\n    evaluate: false\n    lessons_namespace: team:lessons\n    tools: [calculator]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ResolveModels(context.Background(), map[string]llm.Model{"offline": llm.Offline{}}, nil); err != nil {
		t.Fatal(err)
	}
	got := f.NodeAgents()
	if c := got[0]; c.Paradigm != "reflection" || c.MaxRounds != 3 || c.CriticPrompt != "Check the figures." || c.CriticModel == nil || c.CriticModel.Name() != "offline" {
		t.Errorf("critic: %+v", c)
	}
	if l := got[1]; !l.Evaluate || l.Lessons != 2 || l.LessonsNamespace != "" || l.EvaluatorPrompt != "Cite." {
		t.Errorf("learner: %+v", l)
	}
	if q := got[2]; q.Evaluate || q.LessonsNamespace != "team:lessons" {
		t.Errorf("quiet: %+v", q)
	}
	var fe *AgentsFileError
	err = f.checkLessons(node.Config{})
	if !errors.As(err, &fe) || fe.Line != 8 || !strings.Contains(err.Error(), `"memory": {"tool": true}`) {
		t.Errorf("reflexion without the memory tool: %v, want line 8", err)
	}
	err = f.checkLessons(node.Config{MemoryTool: &memory.ToolConfig{Namespace: "agent:x"}})
	if !errors.As(err, &fe) || fe.Line != 15 || !strings.Contains(err.Error(), `agent "quiet": the reflexion paradigm keeps its lessons with the memory tool: add memory to its tools`) {
		t.Errorf("reflexion without memory among its tools: %v, want line 15", err)
	}
}

// A tool is a name or a mapping {name, approval}; approval_timeout is a duration,
// 0 waiting for ever.
func TestParseAgentsApprovals(t *testing.T) {
	f, err := ParseAgents("agents.yaml", []byte(`agents:
  mailer:
    tools:
      - clock
      - {name: send_email, approval: required}
      - name: calculator
        approval: none
    approval_timeout: 10m
  patient:
    tools: [{name: send_email, approval: required}]
    approval_timeout: 0
  plain:
    tools: [clock]
`))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := f.Lookup("mailer")
	if strings.Join(m.Tools, ",") != "clock,send_email,calculator" || strings.Join(m.Approvals, ",") != "send_email" || m.ApprovalTimeout != "10m" {
		t.Errorf("mailer = %+v", m)
	}
	if err := f.CheckTools([]string{"clock", "send_email", "calculator"}); err != nil {
		t.Error(err)
	}
	byName := map[string]node.NamedAgent{}
	for _, a := range f.NodeAgents() {
		byName[a.Name] = a
	}
	if a := byName["mailer"]; a.ApprovalTimeout != 10*time.Minute || strings.Join(a.Approvals, ",") != "send_email" {
		t.Errorf("mailer as the node runs it: %+v", a)
	}
	if a := byName["patient"]; a.ApprovalTimeout != node.NoApprovalTimeout {
		t.Errorf("patient's approval_timeout 0: %v, want NoApprovalTimeout", a.ApprovalTimeout)
	}
	if a := byName["plain"]; a.ApprovalTimeout != 0 || a.Approvals != nil {
		t.Errorf("plain: %+v, want the node's timeout and no approvals", a)
	}
}
