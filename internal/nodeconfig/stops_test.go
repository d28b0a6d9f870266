package nodeconfig

import (
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
)

func TestParseAgentsStopConditionsAndSimple(t *testing.T) {
	f, err := ParseAgents("agents.yaml", []byte(`agents:
  careful:
    max_tokens: 20000
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
	if c.MaxTokens != 20000 || c.LoopRepeats != 5 || c.LoopStaleSteps != actors.LoopOff {
		t.Errorf("careful runs with %+v: want max_tokens 20000, loop_repeats 5, loop_stale_steps off", c)
	}
	if p.MaxTokens != 0 || p.LoopRepeats != 0 || p.LoopStaleSteps != 0 {
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
