package actors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/troupe-run/troupe/internal/textclip"
)

// A verdict is a critic's or an evaluator's judgement of an answer, as the model
// writes it: {"verdict": "pass"}, or {"verdict": "revise", "issues": [{"issue":
// "…", "suggestion": "…"}]}. Reflection's critic and reflexion's evaluator share it.

// Verdicts a critic gives.
const (
	VerdictPass   = "pass"
	VerdictRevise = "revise"
)

// verdict is a parsed verdict.
type verdict struct {
	Verdict string  `json:"verdict"`
	Issues  []issue `json:"issues,omitempty"`
}

// issue is one problem a critic found, and how to fix it.
type issue struct {
	Issue      string `json:"issue"`
	Suggestion string `json:"suggestion,omitempty"`
}

// verdictFormat is the part of a critic's system prompt that says how to answer.
const verdictFormat = "Answer with one JSON object and nothing else (a ```json fence around it is fine):\n" +
	`{"verdict": "pass"} when the answer can be given to the user as it is, or` + "\n" +
	`{"verdict": "revise", "issues": [{"issue": "what is wrong", "suggestion": "how to fix it"}]} with each problem that matters.`

// parseVerdict reads a model's verdict under decision rules: the JSON object
// alone, in a ``` fence (```json or bare), or among the answer's text (jsonBody). A verdict other than pass or revise, a revise without
// issues, or an issue without text is an error that says so, for the model to
// read on a retry.
func parseVerdict(rules int, text string) (verdict, error) {
	body := jsonBody(rules, text, "verdict")
	if body == "" {
		return verdict{}, errors.New("no JSON object found")
	}
	var raw struct {
		Verdict *string `json:"verdict"`
		Issues  []issue `json:"issues"`
	}
	dec := json.NewDecoder(strings.NewReader(body))
	if err := dec.Decode(&raw); err != nil {
		return verdict{}, fmt.Errorf("not a verdict object: %v", err)
	}
	if raw.Verdict == nil {
		return verdict{}, errors.New(`no "verdict" field`)
	}
	v := verdict{Verdict: strings.ToLower(strings.TrimSpace(*raw.Verdict))}
	switch v.Verdict {
	case VerdictPass:
		return v, nil
	case VerdictRevise:
	default:
		return verdict{}, fmt.Errorf(`"verdict" is %q: want "pass" or "revise"`, *raw.Verdict)
	}
	for i, is := range raw.Issues {
		is.Issue, is.Suggestion = strings.TrimSpace(is.Issue), strings.TrimSpace(is.Suggestion)
		if is.Issue == "" {
			return verdict{}, fmt.Errorf(`issue %d has no "issue" text`, i+1)
		}
		v.Issues = append(v.Issues, is)
	}
	if len(v.Issues) == 0 {
		return verdict{}, errors.New(`"revise" without "issues": say what to change`)
	}
	return v, nil
}

// jsonBody returns the JSON object a model's answer holds ("" for none) under
// decision rules, field the key the object is read for ("verdict"). From rules 15
// (rulesJSONBody) it is the whole answer when that is an object; else the first
// object with field that is a ``` fence's whole content, or that starts at the
// answer's first '{', or that ends at its last '}' (the answer's braces before it
// quote code); else, to say what is wrong with it, its first fence's content when
// that is JSON, or the text from its first '{' to its last '}'. Under older rules
// the first "```" was taken for a fence wherever it stood, inside the object's
// strings too (an issue's suggestion quoting a fenced snippet), and the object
// was not read; nor was one after a fence or braces of code.
func jsonBody(rules int, text, field string) string {
	text = strings.TrimSpace(text)
	if rules >= rulesJSONBody {
		if strings.HasPrefix(text, "{") && json.Valid([]byte(text)) {
			return text
		}
		if body, ok := objectWith(text, field); ok {
			return body
		}
		if body, ok := fenced(text); ok && json.Valid([]byte(body)) {
			return body
		}
		return braceSpan(text)
	}
	if body, ok := fenced(text); ok {
		return body
	}
	if strings.HasPrefix(text, "{") && json.Valid([]byte(text)) {
		return text
	}
	return braceSpan(text)
}

// objectTries bounds the fences objectWith reads, and the '{' it tries, from the
// last '}' back, for an object that ends there: each may read the answer's rest
// (a fence's language line runs to the next newline), so the bound keeps a long
// answer full of fences or braces to a few reads of it.
const objectTries = 32

// objectWith returns the first JSON object in text holding key field: a ```
// fence's whole content, in the fences' order; else the object that starts at
// text's first '{'; else the one that ends at its last '}'.
func objectWith(text, field string) (string, bool) {
	for rest, tries := text, 0; tries < objectTries; tries++ {
		body, after, ok := nextFence(rest)
		if !ok {
			break
		}
		if strings.HasPrefix(body, "{") && json.Valid([]byte(body)) && hasField(body, field) {
			return body, true
		}
		rest = after
	}
	i, j := strings.IndexByte(text, '{'), strings.LastIndexByte(text, '}')
	if i < 0 || j < i {
		return "", false
	}
	var first json.RawMessage
	if json.NewDecoder(strings.NewReader(text[i:j+1])).Decode(&first) == nil && hasField(string(first), field) {
		return string(first), true
	}
	for k, tries := j, 0; tries < objectTries; tries++ {
		if k = strings.LastIndexByte(text[:k], '{'); k < i {
			break
		}
		if body := text[k : j+1]; json.Valid([]byte(body)) {
			return body, hasField(body, field) // the outermost: an inner one's span ends in its closers
		}
	}
	return "", false
}

// hasField reports whether the JSON object obj has key field.
func hasField(obj, field string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(obj), &m) != nil {
		return false
	}
	_, ok := m[field]
	return ok
}

// fenced returns the content of text's first ``` fence (its language's line left
// out), and whether it has one.
func fenced(text string) (string, bool) {
	body, _, ok := nextFence(text)
	return body, ok
}

// nextFence returns the content of text's first ``` fence (its language's line
// left out), the text after the fence, and whether it has one.
func nextFence(text string) (body, after string, ok bool) {
	if i := strings.Index(text, "```"); i >= 0 {
		rest := text[i+3:]
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 && !strings.ContainsAny(rest[:nl], "{") {
			rest = rest[nl+1:] // the fence's language ("json") and its line
		}
		if j := strings.Index(rest, "```"); j >= 0 {
			return strings.TrimSpace(rest[:j]), rest[j+3:], true
		}
	}
	return "", "", false
}

// braceSpan returns text from its first '{' to its last '}', "" when it has none.
func braceSpan(text string) string {
	i, j := strings.IndexByte(text, '{'), strings.LastIndexByte(text, '}')
	if i < 0 || j < i {
		return ""
	}
	return text[i : j+1]
}

// issuesText lists issues as numbered lines, for a prompt or a note.
func issuesText(issues []issue) string {
	var b bytes.Buffer
	for i, is := range issues {
		fmt.Fprintf(&b, "%d. %s", i+1, is.Issue)
		if is.Suggestion != "" {
			fmt.Fprintf(&b, " Suggestion: %s", is.Suggestion)
		}
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// reflectionIssuesBytes bounds a critic's issues as a reflection lists them from
// rules 9 (issuesWithin), in the revision prompt and in a task's note; and
// reflectionIssueBytes each issue, with its suggestion.
const (
	reflectionIssuesBytes = 16 << 10
	reflectionIssueBytes  = 2 << 10
)

// issuesList lists issues as the reflection under rules shows them: whole under
// rules before 9, within reflectionIssuesBytes from 9 (issuesWithin).
func issuesList(rules int, issues []issue) string {
	if rules < rulesIssuesWithin {
		return issuesText(issues)
	}
	return issuesWithin(issues, reflectionIssuesBytes, reflectionIssueBytes)
}

// issuesWithin lists the first issues as issuesText does, each clipped to
// perIssue bytes (textclip.Head), as many as fit in max bytes, and
// then a line saying how many more the critic gave.
func issuesWithin(issues []issue, max, perIssue int) string {
	var b strings.Builder
	for i, is := range issues {
		line := fmt.Sprintf("%d. %s", i+1, is.Issue)
		if is.Suggestion != "" {
			line += " Suggestion: " + is.Suggestion
		}
		line = textclip.Head(line, perIssue)
		if b.Len() > 0 && b.Len()+1+len(line) > max {
			fmt.Fprintf(&b, "\n(and %d more issues, not shown)", len(issues)-i)
			break
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(line)
	}
	return b.String()
}
