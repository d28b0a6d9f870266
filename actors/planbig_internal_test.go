package actors

import (
	"fmt"
	"strings"
	"testing"
)

// A plan of more objects than objectTries after prose holding braces, the
// default MaxPlanSteps' 20 steps with their arguments, is read under rules 16:
// jsonBody tried the 32 innermost '{' before the last '}' only, and took a
// "```" the prose names for a fence, so that such a plan fenced after it, read
// under rules 15, was not by this reading as first written. A plan after a
// prose example of the shape
// ({"steps": []}) is read too.
func TestParsePlanReadsABigPlanAfterProseWithBraces(t *testing.T) {
	lim := planLimits{maxSteps: 20, maxDepth: 1, maxNew: 20, hasTool: func(n string) bool { return n == "calculator" },
		chain: func(string, string) bool { return false }, approval: func(string, string) bool { return false }}
	var steps []string
	for i := 1; i <= 20; i++ {
		steps = append(steps, fmt.Sprintf(`{"id": "s%d", "tool": "calculator", "args": {"expression": "%d+1"}}`, i, i))
	}
	plan := `{"steps": [` + strings.Join(steps, ", ") + `]}`
	for _, answer := range []string{
		"A later step quotes an earlier one's result as {{s1}}.\n" + plan,
		"A later step quotes an earlier one's result as {{s1}}.\n" + plan + "\nso s2 reads {{s1}}.",
		"A later step quotes {{s1}}; the plan is in a ``` block:\n```json\n" + plan + "\n```",
		`Plans look like {"steps": []}. Mine: ` + plan,
	} {
		p, err := parsePlan(rulesPlanJSONBody, answer, lim)
		if err != nil || len(p.Steps) != 20 {
			t.Errorf("%.70q…: %d steps, %v; want the plan's 20", answer, len(p.Steps), err)
		}
	}
	// Under 15 the fenced plan is read, the others are not, as they were.
	if _, err := parsePlan(rulesPlanJSONBody-1, "A later step quotes {{s1}}; the plan is in a ``` block:\n```json\n"+plan+"\n```", lim); err != nil {
		t.Errorf("under rules 15: %v", err)
	}
	if _, err := parsePlan(rulesPlanJSONBody-1, "A later step quotes an earlier one's result as {{s1}}.\n"+plan, lim); err == nil {
		t.Error("under rules 15 the plan after braces is read: want it refused, as it was")
	}
}
