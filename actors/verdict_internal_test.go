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
		v, err := parseVerdict(c.text)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want %q", c.text, err, c.err)
			}
			continue
		}
		if err != nil || v.Verdict != c.want || len(v.Issues) != c.issues {
			t.Errorf("%q: %+v %v", c.text, v, err)
		}
	}
}
