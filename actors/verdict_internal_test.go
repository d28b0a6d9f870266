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

// A verdict after code the critic quotes from the draft is read from rules 15:
// after a fence of code, in a fence of its own, or after braces of code in the
// prose. Under 14, and before the reader looked past the first fence and the
// first '{', the code was taken for the verdict, which could not be read.
func TestParseVerdictAfterQuotedCode(t *testing.T) {
	for _, text := range []string{
		"The draft's code:\n```go\nfunc main() { fmt.Println(42) }\n```\nis right.\n```json\n{\"verdict\": \"pass\"}\n```",
		"The draft's code:\n```go\nfunc main() { fmt.Println(42) }\n```\nprints 41.\n{\"verdict\": \"revise\", \"issues\": [{\"issue\": \"it prints 41\"}]}",
		"In `if x { return }` the braces match.\n{\"verdict\": \"revise\", \"issues\": [{\"issue\": \"x is never set\", \"suggestion\": \"set it: `x := f()`\"}]}",
		"The config it gives:\n```json\n{\"port\": 8080}\n```\nis what the task asked.\n{\"verdict\": \"pass\"}",
		"{\"verdict\": \"pass\"}\nThe answer is right; a note: {it could be shorter}.",
	} {
		v, err := parseVerdict(ContextRules, text)
		if err != nil || (v.Verdict == VerdictRevise) != strings.Contains(text, "revise") {
			t.Errorf("%q: %+v %v", text, v, err)
		}
		if _, err := parseVerdict(rulesJSONBody-1, text); err == nil && !strings.HasPrefix(text, "{") {
			t.Errorf("%q: read under rules %d, which could not", text, rulesJSONBody-1)
		}
	}
	// A lesson followed by prose with braces is the lesson alone.
	lesson := "{\"what_went_wrong\": \"w\", \"do_instead\": \"d\"}"
	if got := jsonBody(ContextRules, lesson+"\nUse it as {this}.", "what_went_wrong"); got != lesson {
		t.Errorf("the lesson's body: %q", got)
	}
}

// The verdict reader reads a long answer full of braces or fences a bounded
// number of times: 100,000 nested objects, each a try for an object ending at the
// last '}', and 200,000 fences on one line, each one's language line running to
// the answer's end, would each read the answer's rest; and an answer of invalid
// UTF-8 around a verdict, read as encoding/json reads it.
func TestParseVerdictLongAndInvalidText(t *testing.T) {
	deep := strings.Repeat(`{"a": [`, 100_000) + "}"
	if _, err := parseVerdict(ContextRules, deep); err == nil {
		t.Error("a deep answer read as a verdict")
	}
	fences := strings.Repeat("```a``` ", 200_000) + `{"verdict": "pass"}`
	if v, err := parseVerdict(ContextRules, fences); err != nil || v.Verdict != VerdictPass {
		t.Errorf("after 200,000 fences: %+v %v", v, err)
	}
	v, err := parseVerdict(ContextRules, "\xff\xfe {\"verdict\": \"revise\", \"issues\": [{\"issue\": \"bad \xff byte\"}]} \xff")
	if err != nil || v.Verdict != VerdictRevise || v.Issues[0].Issue != "bad \uFFFD byte" {
		t.Errorf("invalid UTF-8: %+v %v", v, err)
	}
}
