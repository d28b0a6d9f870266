package actors

import (
	"testing"

	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// A task recorded with no rules version whose events show version 2 (a compression
// call) runs, refolded or verified, under version 2: not under today's, which
// decides more than version 2 did (a team's budget, version 3).
func TestUnversionedTaskWithVersion2EvidenceRunsUnderVersion2(t *testing.T) {
	var events []messages.Envelope
	for i, p := range []messages.Payload{
		&messages.TaskSubmitted{Input: "hi"},
		&messages.ModelRequested{Key: effectKey("s", 2), Model: "m", Step: 1, Purpose: pctx.PurposeCondenseSection},
	} {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.CorrelationID = "e"+string(rune('1'+i)), "s", uint64(i+1), "e1"
		events = append(events, e)
	}
	if got, err := verifyRules(events); err != nil || got["e1"] != 2 {
		t.Fatalf("verify assumes rules %v (%v), want 2", got, err)
	}
	st := NewSessionState("s")
	for _, e := range events {
		if err := st.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	if got := st.activeRules(); got != 2 {
		t.Fatalf("the refolded task runs under rules %d, want 2", got)
	}
}
