//go:build review

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
	if len(done.Note) > 64<<10 {
		t.Fatalf("the task's note is %d bytes: the critic's whole verdict", len(done.Note))
	}
}
