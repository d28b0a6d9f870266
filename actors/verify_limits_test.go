package actors_test

import (
	"errors"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
)

// limitSession is a session whose one task, naming agent "writer", the node
// recording it failed at once with failure.
func limitSession(t *testing.T, failure *messages.TaskFailed) []messages.Envelope {
	t.Helper()
	failed := env(t, failure, "lim", 2, "task-l")
	failed.CausationID = "task-l"
	return []messages.Envelope{
		env(t, &messages.TaskSubmitted{Input: "write", Agent: "writer", Rules: actors.ContextRules}, "lim", 1, "task-l"),
		failed,
	}
}

// A task the recording node failed for a limit of its own (it did not run the
// agent, it lacked the task's decision rules, it had lost a secret of the
// recorded prompt) is no divergence where verify's agents lack the limit: the
// failure is what happened, taken as recorded and reported. A model's error is no
// such limit, and still diverges when the agent now decides otherwise.
func TestVerifyTakesARecordingNodesLimitAsRecorded(t *testing.T) {
	writer := actors.Agent{Model: "m", MaxSteps: 3}
	agents := actors.Agents{Default: writer, Named: map[string]actors.Agent{"writer": writer}}
	for _, f := range []*messages.TaskFailed{
		{Reason: messages.ReasonUnknownAgent, Error: `unknown agent "writer": this node does not run it`},
		{Reason: messages.ReasonUnsupportedRules, Error: "the task at seq 1 was recorded under decision rules version 7, which is newer than this build"},
		{Reason: messages.ReasonModelError, Error: "the system prompt recorded with the task held a secret, redacted in the log, " +
			"that no agent of this node holds now among the same words: the task cannot go on under the configuration it began with (give the node that prompt back, or run the task again)"},
	} {
		r, err := actors.VerifyReport(agents, limitSession(t, f), 1, nil)
		if err != nil || r.Divergence != nil {
			t.Errorf("%s: %v %v", f.Reason, r.Divergence, err)
			continue
		}
		if len(r.Limits) != 1 || r.Limits[0] != (actors.LimitFailure{Seq: 2, TaskID: "task-l", Reason: f.Reason, Error: f.Error}) {
			t.Errorf("%s: limits %+v", f.Reason, r.Limits)
		}
	}
	r, err := actors.VerifyReport(agents, limitSession(t, &messages.TaskFailed{Reason: messages.ReasonModelError, Error: "model down"}), 1, nil)
	if err != nil || r.Divergence == nil || r.Divergence.Seq != 2 || len(r.Limits) != 0 {
		t.Errorf("a model's error taken as a limit: %+v %v", r, err)
	}
}

// Agents that fail a task for a limit of their own (here: they do not define its
// agent) where the session recorded the agent's decision cannot re-decide it:
// an *UndecidableError, not a divergence.
func TestVerifyCannotReDecideUnderItsOwnLimit(t *testing.T) {
	events := limitSession(t, &messages.TaskFailed{Reason: messages.ReasonUnknownAgent, Error: `unknown agent "writer": this node does not run it`})
	writer := actors.Agent{Model: "m", MaxSteps: 3}
	full := actors.Agents{Default: writer, Named: map[string]actors.Agent{"writer": writer}}
	// What the agent decides, recorded as the session's seq 2.
	st := actors.NewSessionState("lim").WithAgents(full)
	if err := st.Apply(events[0]); err != nil {
		t.Fatal(err)
	}
	d := st.DecideAmong(full, 2, events[0].TS)
	if _, ok := d.Payload.(*messages.ModelRequested); !ok {
		t.Fatalf("the agent decided %T", d.Payload)
	}
	requested := env(t, d.Payload, "lim", 2, "task-l")
	requested.CausationID = d.CausationID
	recorded := []messages.Envelope{events[0], requested}
	if r, err := actors.VerifyReport(full, recorded, 1, nil); err != nil || r.Divergence != nil {
		t.Fatalf("with the agent: %+v %v", r, err)
	}
	r, err := actors.VerifyReport(actors.Agents{Default: writer}, recorded, 1, nil)
	ue, ok := errors.AsType[*actors.UndecidableError](err)
	if !ok || r.Divergence != nil || ue.Limit.Reason != messages.ReasonUnknownAgent || ue.Limit.Seq != 2 || ue.Recorded != string(messages.TypeModelRequested) {
		t.Fatalf("without the agent: %+v %v", r, err)
	}
}
