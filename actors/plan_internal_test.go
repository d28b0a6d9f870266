package actors

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Each way a plan can be wrong is refused with a reason the planner can act on.
func TestParsePlanRefusesWithAReason(t *testing.T) {
	lim := planLimits{maxSteps: 3, maxDepth: 1, maxNew: 3, hasTool: func(n string) bool {
		return n == "calculator" || n == DelegateTool || n == "calculator_chain" || n == "send_email"
	},
		agents: []string{"researcher"}, delegate: true, chain: func(tool, _ string) bool { return tool == "calculator_chain" },
		approval: func(tool, _ string) bool { return tool == "send_email" }}
	for answer, want := range map[string]string{
		`no plan here`:    "not a JSON object",
		`{"steps": []}`:   "no steps",
		`{"steps": "s1"}`: "not a JSON object",
		`{"steps": [{"id": "1", "goal": "x", "deps": []}]}`:                                                         `step ID "1"`,
		`{"steps": [{"id": "a", "goal": "x"}, {"id": "a", "goal": "y"}]}`:                                           `"a" is used twice`,
		`{"steps": [{"id": "a", "goal": "x"}, {"id": "b", "goal": "y"}, {"id": "c"}, {"id": "d"}]}`:                 "4 steps, more than the 3 allowed",
		`{"steps": [{"id": "a.1.2", "goal": "x"}]}`:                                                                 "1 levels deep",
		`{"steps": [{"id": "a", "tool": "shell"}]}`:                                                                 `unknown tool "shell"`,
		`{"steps": [{"id": "a", "tool": "calculator", "args": [1]}]}`:                                               "args: want a JSON object",
		`{"steps": [{"id": "a", "agent": "writer", "goal": "x"}]}`:                                                  `unknown agent "writer"; the agents are researcher`,
		`{"steps": [{"id": "a", "agent": "researcher", "tool": "calculator"}]}`:                                     "both a tool and an agent",
		`{"steps": [{"id": "a", "tool": "send_email"}]}`:                                                            "needs a human's approval",
		`{"steps": [{"id": "a", "tool": "calculator_chain"}]}`:                                                      "runs a tool chain",
		`{"steps": [{"id": "a"}]}`:                                                                                  "needs a goal",
		`{"steps": [{"id": "a", "goal": "x", "deps": ["b"]}]}`:                                                      `depends on "b", which is not a step`,
		`{"steps": [{"id": "a", "goal": "x", "deps": ["a"]}]}`:                                                      "depends on itself",
		`{"steps": [{"id": "a", "goal": "x", "deps": ["b"]}, {"id": "b", "goal": "y", "deps": ["a"]}]}`:             "cycle: a → b → a",
		`{"steps": [{"id": "a", "tool": "calculator", "args": {"expression": "{{b}}"}}, {"id": "b", "goal": "y"}]}`: "quote {{b}}, which is not among its deps",
		`{"steps": [{"id": "a", "goal": "x"}]} and more`:                                                            "",
	} {
		_, err := parsePlan(ContextRules, answer, lim)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", answer, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: got %v, want %q", answer, err, want)
		}
	}
	// A revised plan keeps the finished steps as they ran and counts only new ones.
	lim.kept = []planStep{{ID: "a", Tool: "calculator", Args: []byte(`{"expression":"1"}`)}}
	lim.maxNew = 1
	p, err := parsePlan(ContextRules, `{"steps": [{"id": "a", "goal": "changed"}, {"id": "b", "goal": "y", "deps": ["a"]}]}`, lim)
	if err != nil || len(p.Steps) != 2 || p.Steps[0].Tool != "calculator" || p.Steps[1].Deps[0] != "a" {
		t.Fatalf("revised plan: %+v %v", p, err)
	}
	if _, err := parsePlan(ContextRules, `{"steps": [{"id": "b", "goal": "y"}, {"id": "c", "goal": "z"}]}`, lim); err == nil || !strings.Contains(err.Error(), "adds 2 steps") {
		t.Fatalf("the total limit: %v", err)
	}
}

// clipMiddle keeps a text that fits, and of a longer one its head and tail, cut
// between characters, within the bound and the marker.
func TestClipMiddle(t *testing.T) {
	if got := clipMiddle("short", 10); got != "short" {
		t.Fatalf("a text that fits: %q", got)
	}
	s := strings.Repeat("é", 100) + strings.Repeat("ü", 100) // 400 bytes
	got := clipMiddle(s, 61)
	if !utf8.ValidString(got) || !strings.HasPrefix(got, strings.Repeat("é", 20)+"\n[… ") || !strings.HasSuffix(got, " left out …]\n"+strings.Repeat("ü", 10)) {
		t.Fatalf("clipped: %q", got)
	}
	if head, tail, _ := strings.Cut(got, "\n[… "); len(head)+len(tail[strings.Index(tail, "]\n")+2:]) > 61 {
		t.Fatalf("kept more than 61 bytes: %q", got)
	}
	if !strings.Contains(got, "[… 340 bytes left out …]") {
		t.Fatalf("the marker: %q", got)
	}
}
