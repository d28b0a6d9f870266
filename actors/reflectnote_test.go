package actors_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
)

// A critic that never passes, whose last verdict lists ten thousand issues: the
// task completes with the latest draft, and its note (task.completed, the result
// a client reads) should not carry the critic's megabyte whole.
func TestReflectionNoteOfAHugeVerdictIsBounded(t *testing.T) {
	var issues []map[string]string
	for i := range 10000 {
		issues = append(issues, map[string]string{"issue": fmt.Sprintf("problem number %d is still there", i), "suggestion": "fix it please, carefully"})
	}
	huge, _ := json.Marshal(map[string]any{"verdict": "revise", "issues": issues})
	steps := []llm.ScriptStep{text("draft 1"), text(revise), text("draft 2"), text(string(huge))}
	events, _, agent := reflecting(t, actors.Reflection{MaxRounds: 2}, nil, steps...)
	done := completion(t, events)
	verifyDeterministic(t, agent, events)
	if done.Output != "draft 2" || !strings.Contains(done.Note, "did not pass in 2 rounds") {
		t.Fatalf("completion: %.300s", done.Note)
	}
	if len(done.Note) > 64<<10 || !strings.Contains(done.Note, "1. problem number 0 is still there") || !strings.Contains(done.Note, "more issues, not shown)") {
		t.Fatalf("the task's note is %d bytes, ending %q: want the critic's first issues and how many more", len(done.Note), done.Note[max(0, len(done.Note)-200):])
	}
	if div := underOlderRules(t, agent, events, 8); div == nil || !strings.Contains(div.Actual, "task.completed") {
		t.Fatalf("under rules 8 the note lists every issue: %+v", div)
	}
}

// The revision prompt lists a huge verdict's issues within the same bound (rules
// 9), each issue clipped, and says how many it left out.
func TestReflectionRevisionOfAHugeVerdictIsBounded(t *testing.T) {
	long := strings.Repeat("very ", 2000) + "long"
	issues := []map[string]string{{"issue": long, "suggestion": "shorten"}}
	for i := range 5000 {
		issues = append(issues, map[string]string{"issue": fmt.Sprintf("problem number %d", i)})
	}
	huge, _ := json.Marshal(map[string]any{"verdict": "revise", "issues": issues})
	steps := []llm.ScriptStep{text("draft 1"), text(string(huge)), text("draft 2"), text(pass)}
	events, model, agent := reflecting(t, actors.Reflection{MaxRounds: 3}, nil, steps...)
	verifyDeterministic(t, agent, events)
	if done := completion(t, events); done.Output != "draft 2" {
		t.Fatalf("completion %+v", done)
	}
	var revision string
	for _, r := range model.requests("") {
		if last := r.Messages[len(r.Messages)-1]; strings.HasPrefix(last.Content, "A reviewer found problems") {
			revision = last.Content
		}
	}
	if revision == "" {
		t.Fatal("no revision prompt")
	}
	if len(revision) > 17<<10 || !strings.Contains(revision, "1. very very") || !strings.Contains(revision, "…") ||
		!strings.Contains(revision, "2. problem number 0") || !strings.Contains(revision, "more issues, not shown)") {
		t.Fatalf("the revision prompt is %d bytes: %.300s … %s", len(revision), revision, revision[max(0, len(revision)-300):])
	}
}
