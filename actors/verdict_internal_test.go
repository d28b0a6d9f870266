package actors

import (
	"strings"
	"testing"
)

func TestParseVerdict(t *testing.T) {
	for _, c := range []struct {
		text, want, err string
		issues          int
	}{
		{`{"verdict": "pass"}`, "pass", "", 0},
		{"```json\n{\"verdict\": \"Pass\"}\n```", "pass", "", 0},
		{"```\n{\"verdict\": \"revise\", \"issues\": [{\"issue\": \"x\", \"suggestion\": \"y\"}, {\"issue\": \"z\"}]}\n```", "revise", "", 2},
		{"Here is my verdict: {\"verdict\": \"pass\"} — done.", "pass", "", 0},
		{"Looks fine.", "", "no JSON object found", 0},
		{`{"verdict": "maybe"}`, "", `"verdict" is "maybe"`, 0},
		{`{"ok": true}`, "", `no "verdict" field`, 0},
		{`{"verdict": "revise"}`, "", `"revise" without "issues"`, 0},
		{`{"verdict": "revise", "issues": [{"suggestion": "y"}]}`, "", `issue 1 has no "issue" text`, 0},
		{`{"verdict": "pass"`, "", "no JSON object found", 0},
		{`{"verdict": 1}`, "", "not a verdict object", 0},
	} {
		for _, rules := range []int{rulesJSONBody - 1, ContextRules} {
			v, err := parseVerdict(rules, c.text)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("rules %d, %q: err %v, want %q", rules, c.text, err, c.err)
				}
				continue
			}
			if err != nil || v.Verdict != c.want || len(v.Issues) != c.issues {
				t.Errorf("rules %d, %q: %+v %v", rules, c.text, v, err)
			}
		}
	}
}

// A verdict whose issue quotes a fenced snippet is read from rules 15: the whole
// answer is the object, or a fence holds no JSON. Under 14 the first "```",
// inside the object's strings or around a snippet before it, was taken for the
// verdict's fence, and the verdict could not be read.
func TestParseVerdictQuotingAFence(t *testing.T) {
	for _, text := range []string{
		"{\"verdict\": \"revise\", \"issues\": [{\"issue\": \"the snippet is not fenced\", \"suggestion\": \"wrap it in ```go ... ``` fences\"}]}",
		"My verdict:\n{\"verdict\": \"revise\", \"issues\": [{\"issue\": \"use a fence: ```sh\\nmake\\n```\"}]}",
		"The draft quotes\n```python\nprint(17 * 23)\n```\nwhich is right.\n{\"verdict\": \"pass\"}",
	} {
		v, err := parseVerdict(ContextRules, text)
		if err != nil || (v.Verdict == VerdictRevise) != strings.Contains(text, "revise") {
			t.Errorf("%q: %+v %v", text, v, err)
		}
		if _, err := parseVerdict(rulesJSONBody-1, text); err == nil {
			t.Errorf("%q: read under rules %d, which could not", text, rulesJSONBody-1)
		}
	}
}
