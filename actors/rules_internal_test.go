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

// A task the sender gave decoded (SubmitTask.Task) is stamped as the same task
// decoded from its envelope would be, byte for byte, without decoding it again; and
// the sender's payload is left as the envelope encodes it, so that a second try of
// the same SubmitTask (a claim refused, then the session's log read) stamps the
// same bytes again.
func TestStampRulesTakesTheDecodedTask(t *testing.T) {
	for _, rules := range []int{0, ContextRules} {
		task := &messages.TaskSubmitted{Input: "What is 12 * (7 + 5)?", Agent: "calc", MaxSteps: 4, Rules: rules}
		e, err := messages.NewEnvelope(task)
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq = "t1", "s", 1
		st := NewSessionState("s").WithAgents(Agents{Named: map[string]Agent{"calc": {Name: "calc", Model: "m", SystemPrompt: "You calculate."}}})
		want, wantP := stampRules(e, nil, st)
		for try := 1; try <= 2; try++ {
			got, p := stampRules(e, task, st)
			if string(got.Payload) != string(want.Payload) {
				t.Fatalf("rules %d, try %d: stamped payload %s, want %s", rules, try, got.Payload, want.Payload)
			}
			if gp, ok := p.(*messages.TaskSubmitted); !ok || !sameJSON(gp, wantP) || gp.ConfigDigest == "" || gp.Config != nil {
				t.Fatalf("rules %d, try %d: payload %+v, want %+v", rules, try, p, wantP)
			}
			if task.Rules != rules || task.ConfigDigest != "" || task.Config != nil {
				t.Fatalf("rules %d, try %d: the sender's task was changed to rules %d", rules, try, task.Rules)
			}
		}
		decoding := testing.AllocsPerRun(100, func() { stampRules(e, nil, st) })
		given := testing.AllocsPerRun(100, func() { stampRules(e, task, st) })
		if given >= decoding {
			t.Errorf("rules %d: %v allocations with the task given, %v decoding it: want fewer (not decoded again)", rules, given, decoding)
		}
	}
}

// A task under rules 1 to 8 builds its contexts counting the joins of a message of
// several items additively, as those rules did (pctx.Options.AdditiveJoins); one
// under today's (0 or ContextRules) counts them as they are sent.
func TestContextOptionsCountJoinsUnderTheirRules(t *testing.T) {
	for v := MinContextRules; v <= ContextRules; v++ {
		a := Agent{Context: ContextOptions{Window: 4000}}.underRules(v)
		if got, want := a.Context.options().AdditiveJoins, v < rulesExactJoins; got != want {
			t.Errorf("rules %d: AdditiveJoins %v, want %v", v, got, want)
		}
	}
	if (ContextOptions{}).options().AdditiveJoins {
		t.Errorf("today's rules count joins additively")
	}
}
