package nodeconfig

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

func TestParseAgentsContext(t *testing.T) {
	f, err := ParseAgents("agents.yaml", []byte(`agents:
  small:
    context:
      window: 8000
      reserved_output: 1000
      history_turns: 12
  everything:
    context: {history_turns: all}
  plain:
    tools: [calculator]
`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]actors.ContextOptions{}
	for _, a := range f.NodeAgents() {
		got[a.Name] = a.Context
	}
	if got["small"] != (actors.ContextOptions{Window: 8000, ReservedOutput: 1000, HistoryTurns: 12}) {
		t.Errorf("small runs with %+v", got["small"])
	}
	if got["everything"] != (actors.ContextOptions{HistoryTurns: -1}) {
		t.Errorf("everything runs with %+v", got["everything"])
	}
	if got["plain"] != (actors.ContextOptions{}) {
		t.Errorf("plain runs with %+v: want the node's", got["plain"])
	}
}

func TestParseAgentsContextErrors(t *testing.T) {
	for _, c := range []struct {
		name, file string
		line       int
		want       string
	}{
		{"not a mapping", "agents:\n  a:\n    context: 8000\n", 3, "want a mapping of window, reserved_output, history_turns"},
		{"window too small", "agents:\n  a:\n    context:\n      window: 100\n", 4, `window "100": want the model's context window, an integer from 256 to 10000000 tokens`},
		{"window string", "agents:\n  a:\n    context:\n      window: big\n", 4, `window "big"`},
		{"reserved zero", "agents:\n  a:\n    context:\n      window: 8000\n      reserved_output: 0\n", 5, `reserved_output "0"`},
		{"reserved beyond window", "agents:\n  a:\n    context:\n      window: 8000\n      reserved_output: 9000\n", 4, "reserved output 9000 is out of range: want 1 to less than the window"},
		{"history turns zero", "agents:\n  a:\n    context:\n      history_turns: 0\n", 4, `history_turns "0": want the latest conversation messages considered, an integer from 1 to 100000, or all`},
		{"history turns word", "agents:\n  a:\n    context:\n      history_turns: most\n", 4, `history_turns "most"`},
		{"unknown field", "agents:\n  a:\n    context:\n      budget: 5\n", 4, `unknown field "budget": the fields are window, reserved_output, history_turns`},
		{"twice", "agents:\n  a:\n    context:\n      window: 8000\n      window: 9000\n", 5, `field "window" is given twice`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseAgents("agents.yaml", []byte(c.file))
			var fe *AgentsFileError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want an AgentsFileError", err)
			}
			if fe.Line != c.line || !strings.Contains(fe.Msg, c.want) || !strings.Contains(fe.Msg, `agent "a": context: `) {
				t.Errorf("err = %v, want line %d and %q", err, c.line, c.want)
			}
		})
	}
}

// The configuration file's context section is the default agent's, and the
// default of a named agent's fields it does not set.
func TestConfigFileContext(t *testing.T) {
	load := func(body string) (File, error) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "troupe.json")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return Load(path)
	}
	fc, err := load(`{"context": {"window": 16000, "reserved_output": 2000}}`)
	if err != nil {
		t.Fatal(err)
	}
	a, err := fc.Agent(AgentOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cfg node.Config
	a.Apply(&cfg)
	if cfg.Context != (actors.ContextOptions{Window: 16000, ReservedOutput: 2000}) {
		t.Errorf("default agent context %+v", cfg.Context)
	}
	for body, want := range map[string]string{
		`{"context": {"window": 10}}`:                            "context: context window 10 is out of range",
		`{"context": {"window": 8000, "reserved_output": 8000}}`: "context: context reserved output 8000 is out of range",
		`{"context": {"window": 2000}}`:                          "context: context reserved output 4096 leaves no room in the window of 2000 tokens",
		`{"context": {"turns": 5}}`:                              "turns",
	} {
		if _, err := load(body); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", body, err, want)
		}
	}
}

// An agent's context section sets what its tasks gather (0: none; absent: the
// node's default); a number out of range, or for a source the agent does not
// have, is an error at its line.
func TestParseAgentsContextGather(t *testing.T) {
	f, err := ParseAgents("agents.yaml", []byte(`agents:
  reader:
    knowledge: papers
    context: {evidence: 8, recall: 0, notes: 3}
  plain:
    tools: [calculator]
`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]actors.ContextOptions{}
	for _, a := range f.NodeAgents() {
		got[a.Name] = a.Context
	}
	if got["reader"] != (actors.ContextOptions{Evidence: 8, Recall: actors.GatherOff, Notes: 3}) || got["plain"] != (actors.ContextOptions{}) {
		t.Fatalf("agents run with %+v", got)
	}
	for _, c := range []struct {
		file string
		line int
		want string
	}{
		{"agents:\n  a:\n    context:\n      evidence: 50\n", 4, "evidence 50: want the chunks of the knowledge base gathered for each task, an integer from 0 (none) to 20"},
		{"agents:\n  a:\n    context:\n      recall: -1\n", 4, "recall -1: want the memories gathered"},
		{"agents:\n  a:\n    context:\n      notes: some\n", 4, `notes "some": want an integer`},
	} {
		_, err := ParseAgents("agents.yaml", []byte(c.file))
		var fe *AgentsFileError
		if !errors.As(err, &fe) || fe.Line != c.line || !strings.Contains(fe.Msg, c.want) {
			t.Errorf("%q: err = %v, want line %d and %q", c.file, err, c.line, c.want)
		}
	}
	// Evidence for an agent without a knowledge base to search.
	f, err = ParseAgents("agents.yaml", []byte("agents:\n  a:\n    tools: [calculator]\n    context:\n      window: 8000\n      evidence: 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = f.CheckNodeTools(node.Config{})
	var fe *AgentsFileError
	if !errors.As(err, &fe) || fe.Line != 6 || !strings.Contains(fe.Msg, `agent "a": context evidence 3: the agent has no knowledge base`) {
		t.Fatalf("err = %v, want line 6 and the reason", err)
	}
}

// The configuration file's context section sets the node's gathering defaults.
func TestConfigFileContextGather(t *testing.T) {
	path := filepath.Join(t.TempDir(), "troupe.json")
	if err := os.WriteFile(path, []byte(`{"context": {"evidence": 0, "recall": 3}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fc, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fc.Context.Options(); got != (actors.ContextOptions{Evidence: actors.GatherOff, Recall: 3}) {
		t.Fatalf("context %+v", got)
	}
	if err := os.WriteFile(path, []byte(`{"context": {"notes": 500}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "context: notes 500: want the notes gathered for each task, an integer from 0 (none) to 100") {
		t.Fatalf("err = %v", err)
	}
}

// An agent's context settings that are in range alone but not with the node's
// (a window of 600 tokens under the default 4096 reserved for the answer) are
// refused by CheckNodeTools, which node agents list, node run and serve and replay
// verify and fork all call, as the node would refuse them at its start; the error
// names the line of the agent's context section.
func TestCheckNodeToolsRefusesWhatTheNodeRefuses(t *testing.T) {
	f, err := ParseAgents("agents.yaml", []byte("agents:\n  tiny:\n    tools: [calculator]\n    context: {window: 600}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{}
	cfg.Agents = f.NodeAgents()
	_, buildErr := cfg.AllAgents()
	if buildErr == nil {
		t.Fatal("the node builds an agent of window 600 and the default reserved output")
	}
	err = f.CheckNodeTools(node.Config{})
	var fe *AgentsFileError
	if !errors.As(err, &fe) || fe.Line != 4 || !strings.Contains(fe.Msg, `agent "tiny", with the default agent's context settings: context reserved output 4096 leaves no room in the window of 600 tokens`) {
		t.Fatalf("err = %v, want line 4 and the node's reason (%v)", err, buildErr)
	}
	// With the node's own reserved output small enough, the same file is fine.
	if err := f.CheckNodeTools(node.Config{Context: actors.ContextOptions{ReservedOutput: 100}}); err != nil {
		t.Fatalf("with a node reserving 100 tokens: %v", err)
	}
}

// A configuration file whose system prompt leaves no room in its window is refused
// when its agent is built, with the file's other errors (node run exits 2 on
// those), not only when the node starts.
func TestConfigFileSystemPromptMustFit(t *testing.T) {
	fc := File{SystemPrompt: strings.Repeat("word ", 2000), Context: ContextFile{Window: 1000, ReservedOutput: 100}}
	if _, err := fc.Agent(AgentOptions{}); err == nil || !strings.Contains(err.Error(), "system_prompt: the default agent: its system prompt is 2001 tokens") {
		t.Fatalf("err = %v", err)
	}
	fc.Context.Window = 4000
	if _, err := fc.Agent(AgentOptions{}); err != nil {
		t.Fatalf("with room: %v", err)
	}
}

// A configuration file's agent is refused for its prompt as the node refuses it,
// counting the schemas of the tools the file gives it: a system prompt that fits
// its window alone, but not with the schemas of calculator, clock and the
// http_fetch the file enables, is refused with the counts; in a wider window it is
// taken.
func TestConfigFilePromptMustFitWithItsTools(t *testing.T) {
	fc := File{SystemPrompt: strings.Repeat("word ", 700), Tools: ToolsFile{HTTPFetch: &HTTPFetchFile{}},
		Context: ContextFile{Window: 1000, ReservedOutput: 100}}
	if err := (actors.Agent{SystemPrompt: fc.SystemPrompt, Context: fc.Context.Options()}).CheckPromptFits(); err != nil {
		t.Fatalf("the prompt alone does not fit: %v", err)
	}
	_, err := fc.Agent(AgentOptions{})
	var fit *actors.PromptFitError
	if !errors.As(err, &fit) || fit.Prompt != 701 || fit.Tools != 3 || fit.Total < 900 || fit.Window != 1000 || fit.Reserved != 100 {
		t.Fatalf("err = %v (%+v), want the prompt of 701 tokens refused with its 3 tools", err, fit)
	}
	want := fmt.Sprintf("system_prompt: the default agent: its system prompt is 701 tokens and the schemas of the 3 tools it offers are %d tokens: %d in all, "+
		"with the message's framing, which leaves no room for a task in the context window of 1000 tokens less the 100 reserved for the answer", fit.ToolTokens, fit.Total)
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("err = %v, want %q", err, want)
	}
	// The node counts the same: it refuses the agent at its start, with the same numbers.
	a, _ := (File{Tools: fc.Tools}).Agent(AgentOptions{})
	var cfg node.Config
	a.Apply(&cfg)
	cfg.SystemPrompt, cfg.Context, cfg.DataDir = fc.SystemPrompt, fc.Context.Options(), t.TempDir()
	if _, err := node.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(want, "system_prompt: ")) {
		t.Errorf("node.New: %v, want %q", err, want)
	}
	fc.Context.Window = 2000
	if _, err := fc.Agent(AgentOptions{}); err != nil {
		t.Errorf("with room: %v", err)
	}
	// A chain whose step calls a tool of an MCP server, which connects later, is
	// counted (its own schema) and left to the node's checks once it has.
	fc.Chains = []tools.Chain{{Name: "forecast", Description: "The weather.", Steps: []tools.ChainStep{{Name: "get", Tool: "wx__forecast", Args: `{}`}}}}
	if _, err := fc.Agent(AgentOptions{}); err != nil {
		t.Errorf("with a chain over an MCP tool: %v", err)
	}
	fc.Context.Window = 1000
	if _, err := fc.Agent(AgentOptions{}); !errors.As(err, &fit) || fit.Tools != 4 {
		t.Errorf("with a chain over an MCP tool, in the small window: %v, want its 4 tools counted", err)
	}
}
