package nodeconfig

import (
	"errors"
	"strings"
	"testing"
)

const goodAgents = `# two agents
agents:
  researcher:
    description: Finds and checks facts.
    system_prompt: You research.
    paradigm: react
    tools: [calculator, clock]
    max_steps: 8
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
	if a.Paradigm != "function_calling" || a.Tools != nil || a.SystemPrompt != "You help.\n" || a.Line != 9 {
		t.Errorf("assistant = %+v", a)
	}
	if b.Paradigm != "react" || strings.Join(b.Tools, ",") != "calculator,clock" || b.MaxSteps != 8 ||
		b.Description != "Finds and checks facts." || b.Line != 3 {
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
		{"future paradigm", "agents:\n  a:\n    paradigm: plan_execute\n", 3, `paradigm "plan_execute" is not supported yet`},
		{"unknown paradigm", "agents:\n  a:\n    paradigm: chaos\n", 3, `unknown paradigm "chaos"`},
		{"max steps", "agents:\n  a:\n    max_steps: 0\n", 3, "max_steps"},
		{"max steps string", "agents:\n  a:\n    max_steps: many\n", 3, "max_steps"},
		{"tools not a list", "agents:\n  a:\n    tools: calculator\n", 3, "want a list"},
		{"tool twice", "agents:\n  a:\n    tools:\n      - clock\n      - clock\n", 5, "listed twice"},
		{"model", "agents:\n  a:\n    model: offline\n", 3, "model is not supported yet"},
		{"memory", "agents:\n  a:\n    memory: {namespace: agent:a}\n", 3, "memory is not supported yet"},
		{"default", "agents:\n  default: {}\n", 2, `"default" is the node's own agent`},
		{"duplicate agent", "agents:\n  a: {}\n  a: {}\n", 3, "declared twice"},
		{"duplicate field", "agents:\n  a:\n    paradigm: react\n    paradigm: react\n", 4, "given twice"},
		{"prompt not a string", "agents:\n  a:\n    system_prompt: [x]\n", 3, "system_prompt: want a string"},
		{"agent not a mapping", "agents:\n  a: react\n", 2, "want a mapping of its fields"},
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
