package actors

import (
	"strings"
	"testing"
)

// A tool step's args quote {{a}}, a step split into parts (a.1, a.2), only when all
// its parts are among its deps: the quote is their results, one per line, and a
// step that waited for a.1 alone ran before a.2 had one, its tool called with a
// line missing. From rules 18 such a plan is refused with the parts it must wait
// for; under 17 it was taken, as it was.
func TestParsePlanRefusesAQuoteOfPartsNotAllAmongItsDeps(t *testing.T) {
	lim := planLimits{maxSteps: 5, maxDepth: 1, maxNew: 5, hasTool: func(n string) bool { return n == "calculator" },
		chain: func(string, string) bool { return false }, approval: func(string, string) bool { return false }}
	partial := `{"steps": [{"id": "a.1", "goal": "x"}, {"id": "a.2", "goal": "y"},
		{"id": "b", "tool": "calculator", "args": {"expression": "{{a}}"}, "deps": ["a.1"]}]}`
	_, err := parsePlan(rulesQuotedParts, partial, lim)
	if err == nil || !strings.Contains(err.Error(), "step b: its args quote {{a}}, whose part a.2 is not among its deps") {
		t.Fatalf("a quote of a split step waiting for one part: %v; want it refused naming a.2", err)
	}
	if _, err := parsePlan(rulesQuotedParts-1, partial, lim); err != nil {
		t.Fatalf("under rules %d: %v; want it taken, as it was", rulesQuotedParts-1, err)
	}
	for _, ok := range []string{
		// Every part among its deps, or the split step itself (its parts).
		`{"steps": [{"id": "a.1", "goal": "x"}, {"id": "a.2", "goal": "y"},
			{"id": "b", "tool": "calculator", "args": {"expression": "{{a}}"}, "deps": ["a.1", "a.2"]}]}`,
		`{"steps": [{"id": "a.1", "goal": "x"}, {"id": "a.2", "goal": "y"},
			{"id": "b", "tool": "calculator", "args": {"expression": "{{a}}"}, "deps": ["a"]}]}`,
		// A quote of the one part it waits for.
		`{"steps": [{"id": "a.1", "goal": "x"}, {"id": "a.2", "goal": "y"},
			{"id": "b", "tool": "calculator", "args": {"expression": "{{a.1}}"}, "deps": ["a.1"]}]}`,
	} {
		if _, err := parsePlan(rulesQuotedParts, ok, lim); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}
