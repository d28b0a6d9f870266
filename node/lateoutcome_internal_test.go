package node

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/troupe-run/troupe/messages"
)

// A delegate call answered after its parent's task failed records its child's
// error as a call answered in time does: cut to the answer's bound, whole
// characters, with a note naming the child session, which holds it whole.
func TestDelegateLateAnswersHugeErrorIsCut(t *testing.T) {
	page := "upstream: " + strings.Repeat("<div>méchant gateway</div>", 60<<10/27)
	out, errText := lateOutcome("p.sub4", childFigures{failed: &messages.TaskFailed{Reason: messages.ReasonModelError, Error: page}})
	if out != "" || len(errText) > MaxDelegateResult || !utf8.ValidString(errText) {
		t.Fatalf("the late answer's error is %d bytes (valid UTF-8 %v), more than %d: %.200q",
			len(errText), utf8.ValidString(errText), MaxDelegateResult, errText)
	}
	if !strings.Contains(errText, "(model_error) in child session p.sub4: upstream: <div>") || !strings.Contains(errText, "the whole of it is in child session p.sub4]") {
		t.Errorf("the late answer's error: %.300q … %q", errText, errText[max(len(errText)-200, 0):])
	}
	if out, errText = lateOutcome("p.sub4", childFigures{failed: &messages.TaskFailed{Reason: messages.ReasonCancelled, Error: "stop"}}); errText != "sub-agent failed (cancelled) in child session p.sub4: stop" || out != "" {
		t.Errorf("a short error: %q, %q", out, errText)
	}
}
