package nodeconfig

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/node"
)

func TestParseAgentsStopConditionsAndSimple(t *testing.T) {
	f, err := ParseAgents("agents.yaml", []byte(`agents:
  careful:
    max_tokens: 20000
    max_cost_usd: 0.75
    loop_repeats: 5
    loop_stale_steps: 0
  plain:
    tools: [calculator]
  oneshot:
    paradigm: simple
    system_prompt: Answer in one sentence.
`))
	if err != nil {
		t.Fatal(err)
	}
	careful, _ := f.Lookup("careful")
	if careful.MaxTokens != 20000 || careful.LoopRepeats == nil || *careful.LoopRepeats != 5 || careful.LoopStaleSteps == nil || *careful.LoopStaleSteps != 0 {
		t.Errorf("careful = %+v", careful)
	}
	oneshot, _ := f.Lookup("oneshot")
	if oneshot.Paradigm != "simple" || oneshot.Tools == nil || len(oneshot.Tools) != 0 {
		t.Errorf("oneshot = %+v, want paradigm simple and no tools", oneshot)
	}
	byName := map[string]int{}
	for i, a := range f.NodeAgents() {
		byName[a.Name] = i
	}
	na := f.NodeAgents()
	c, p, o := na[byName["careful"]], na[byName["plain"]], na[byName["oneshot"]]
	if c.MaxTokens != 20000 || c.MaxCostUSD != 0.75 || c.LoopRepeats != 5 || c.LoopStaleSteps != actors.LoopOff {
		t.Errorf("careful runs with %+v: want max_tokens 20000, loop_repeats 5, loop_stale_steps off", c)
	}
	if p.MaxTokens != 0 || p.MaxCostUSD != 0 || p.LoopRepeats != 0 || p.LoopStaleSteps != 0 {
		t.Errorf("plain runs with %+v: want the defaults", p)
	}
	if o.Paradigm != "simple" || o.Tools == nil || len(o.Tools) != 0 {
		t.Errorf("oneshot runs with %+v", o)
	}
	if err := f.CheckTools([]string{"calculator"}); err != nil {
		t.Error(err)
	}
}

func TestParseAgentsStopConditionErrors(t *testing.T) {
	for _, c := range []struct {
		name, file string
		line       int
		want       string
	}{
		{"max tokens zero", "agents:\n  a:\n    max_tokens: 0\n", 3, `max_tokens "0": want an integer from 1 to 100000000`},
		{"max tokens negative", "agents:\n  a:\n    description: x\n    max_tokens: -5\n", 4, `max_tokens "-5"`},
		{"max tokens too many", "agents:\n  a:\n    max_tokens: 100000001\n", 3, "from 1 to 100000000"},
		{"max tokens string", "agents:\n  a:\n    max_tokens: lots\n", 3, `max_tokens "lots"`},
		{"max tokens float", "agents:\n  a:\n    max_tokens: 1.5\n", 3, `max_tokens "1.5"`},
		{"max cost zero", "agents:\n  a:\n    max_cost_usd: 0\n", 3, `max_cost_usd "0": want a number of US dollars above 0, at most 1000000`},
		{"max cost negative", "agents:\n  a:\n    max_cost_usd: -0.5\n", 3, `max_cost_usd "-0.5"`},
		{"max cost too much", "agents:\n  a:\n    max_cost_usd: 1e7\n", 3, `max_cost_usd "1e7"`},
		{"max cost infinite", "agents:\n  a:\n    max_cost_usd: .inf\n", 3, `max_cost_usd ".inf"`},
		{"max cost not a number", "agents:\n  a:\n    max_cost_usd: .nan\n", 3, `max_cost_usd ".nan"`},
		{"max cost string", "agents:\n  a:\n    max_cost_usd: \"$5\"\n", 3, `max_cost_usd "$5"`},
		{"loop repeats one", "agents:\n  a:\n    loop_repeats: 1\n", 3, `loop_repeats "1": want 0 (off) or an integer from 2 to 1000`},
		{"loop repeats negative", "agents:\n  a:\n    loop_repeats: -1\n", 3, "loop_repeats"},
		{"loop repeats list", "agents:\n  a:\n    loop_repeats: [3]\n", 3, "loop_repeats"},
		{"loop stale steps", "agents:\n  a:\n    loop_stale_steps: 1001\n", 3, `loop_stale_steps "1001": want 0 (off) or an integer from 1 to 1000`},
		{"loop stale twice", "agents:\n  a:\n    loop_stale_steps: 2\n    loop_stale_steps: 3\n", 4, "given twice"},
		{"simple with tools", "agents:\n  a:\n    tools: [calculator]\n    paradigm: simple\n", 3, `paradigm "simple" offers no tools`},
		{"simple with no tools listed", "agents:\n  a:\n    paradigm: simple\n    tools: []\n", 4, `remove "tools"`},
		{"unknown field lists them", "agents:\n  a:\n    budget: 5\n", 3, "max_tokens, loop_repeats, loop_stale_steps"},
		{"unknown paradigm lists simple", "agents:\n  a:\n    paradigm: chaos\n", 3, "simple"},
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
		})
	}
}

// The configuration file gives the default agent its stop conditions, with the
// agents file's names and ranges.
func TestConfigFileStopConditions(t *testing.T) {
	load := func(body string) (File, error) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "troupe.json")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return Load(path)
	}
	fc, err := load(`{"max_tokens": 5000, "loop_repeats": 0, "loop_stale_steps": 6, "max_cost_usd": 2.5}`)
	if err != nil {
		t.Fatal(err)
	}
	a, err := fc.Agent(AgentOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cfg node.Config
	a.Apply(&cfg)
	if cfg.MaxTokens != 5000 || cfg.MaxCostUSD != 2.5 || cfg.LoopRepeats != actors.LoopOff || cfg.LoopStaleSteps != 6 {
		t.Errorf("config: max_tokens %d, loop_repeats %d, loop_stale_steps %d; want 5000, off, 6", cfg.MaxTokens, cfg.LoopRepeats, cfg.LoopStaleSteps)
	}
	fc, err = load(`{"max_steps": 5}`)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := fc.Agent(AgentOptions{}); a.MaxTokens != 0 || a.LoopRepeats != 0 || a.LoopStaleSteps != 0 {
		t.Errorf("absent stop conditions: %+v, want the node's defaults", a)
	}
	for body, want := range map[string]string{
		`{"max_tokens": -1}`:         "max_tokens: -1 is out of range",
		`{"max_tokens": 100000001}`:  "max_tokens: 100000001 is out of range",
		`{"loop_repeats": 1}`:        "loop_repeats: 1 is out of range: want 0 (off) or 2 to 1000",
		`{"loop_stale_steps": 1001}`: "loop_stale_steps: 1001 is out of range",
		`{"max_tokens": "many"}`:     "max_tokens",
		`{"max_cost_usd": -1}`:       "max_cost_usd: -1 is out of range",
		`{"max_cost_usd": 2e6}`:      "max_cost_usd: 2e+06 is out of range",
		`{"max_cost_usd": "cheap"}`:  "max_cost_usd",
	} {
		if _, err := load(body); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}
