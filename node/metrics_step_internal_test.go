package node

import (
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// A model call is a step of the loop when it names no purpose, whatever else its
// payload holds: the word "purpose" in its context report does not make it one
// with a purpose.
func TestIsLoopStepReadsOnlyThePurposeMember(t *testing.T) {
	report := &messages.ContextReport{Kept: []messages.ContextItem{{ID: "purpose", Kind: `"purpose":"plan"`}}}
	for _, c := range []struct {
		p    *messages.ModelRequested
		step bool
	}{
		{&messages.ModelRequested{Key: "k", Step: 1}, true},
		{&messages.ModelRequested{Key: "k", Step: 1, Context: report}, true},
		{&messages.ModelRequested{Key: "k", Purpose: "plan"}, false},
		{&messages.ModelRequested{Key: "k", Purpose: "plan", Context: report}, false},
	} {
		e := envelope(t, c.p, "e", "t")
		if got := isLoopStep(e.Payload); got != c.step {
			t.Errorf("isLoopStep(%s) = %v, want %v", e.Payload, got, c.step)
		}
	}
}
