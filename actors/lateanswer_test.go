package actors_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// recordCancelledWithCall appends to the harness's log a session whose task,
// recorded under rules, requested a delegate call and was cancelled before the
// call was answered; it returns the call's key.
func recordCancelledWithCall(t *testing.T, h *harness, session string, rules int) string {
	t.Helper()
	key := messages.EffectKey{SessionID: session, Seq: 4}.String()
	mkey := messages.EffectKey{SessionID: session, Seq: 2}.String()
	var events []messages.Envelope
	for i, p := range []messages.Payload{
		&messages.TaskSubmitted{Input: "go", Rules: rules},
		&messages.ModelRequested{Key: mkey, Model: "scripted", Step: 1},
		&messages.ModelResponded{Key: mkey, Model: "scripted", Usage: messages.Usage{PromptTokens: 100},
			Message: messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: "d1", Name: "delegate", Arguments: `{"agent":"helper","task":"6*7"}`}}}},
		&messages.ToolCallRequested{Key: key, CallID: "d1", Tool: "delegate", Arguments: `{"agent":"helper","task":"6*7"}`, Step: 1},
		&messages.TaskFailed{Reason: messages.ReasonCancelled, Error: "enough", Steps: 1, Usage: messages.Usage{PromptTokens: 100}},
	} {
		e := env(t, p, session, uint64(i+1), "task-1")
		e.TS = int64(i + 1)
		events = append(events, e)
	}
	if err := h.log.Append(context.Background(), events); err != nil {
		t.Fatal(err)
	}
	return key
}

func (h *harness) answerLate(m *actors.LateAnswer) any {
	h.t.Helper()
	res, err := h.system.Root.RequestFuture(h.host, m, 10*time.Second).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

// Under rules 10 a delegate call left unanswered by its task's end is answered
// after it, with what the child spent: a tool.call.completed of the task after its
// task.failed, which completes the task's sub-agents' usage; a second answer is a
// duplicate and records nothing.
func TestLateAnswerCompletesAnEndedTasksSubAgentsUsage(t *testing.T) {
	h := newHarness(t, harnessOpts{model: script(t, llm.ScriptStep{Content: "unused"})})
	key := recordCancelledWithCall(t, h, "late", actors.ContextRules)
	spent := messages.Usage{PromptTokens: 300, CompletionTokens: 7}
	res := h.answerLate(&actors.LateAnswer{SessionID: "late", Key: key, Error: "sub-agent helper failed (cancelled)", Usage: spent})
	if acc, ok := res.(*actors.TaskAccepted); !ok || acc.Seq != 6 {
		t.Fatalf("the late answer was answered %v, want accepted at seq 6", res)
	}
	if acc, ok := h.answerLate(&actors.LateAnswer{SessionID: "late", Key: key, Usage: spent}).(*actors.TaskAccepted); !ok || !acc.Duplicate {
		t.Fatalf("a second late answer was answered %+v, want a duplicate", acc)
	}
	events, err := h.log.Read(context.Background(), "late", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 6 {
		t.Fatalf("the session has %d events, want 6", len(events))
	}
	last := events[5]
	p, err := last.Decode()
	if err != nil {
		t.Fatal(err)
	}
	c, ok := p.(*messages.ToolCallCompleted)
	if !ok || c.Key != key || c.Usage != spent || last.CorrelationID != "task-1" || last.CausationID != events[3].ID || last.Actor != "tool/delegate" {
		t.Fatalf("recorded %s %s (task %s, caused by %s, actor %s)", last.Type, last.Payload, last.CorrelationID, last.CausationID, last.Actor)
	}
	st := actors.NewSessionState("late")
	for _, e := range events {
		if err := st.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	if got := st.TaskSubAgentsUsage("task-1"); got != spent {
		t.Errorf("the task's sub-agents' usage is %+v, want the child's %+v", got, spent)
	}
	if status, _, _ := st.Status(); status != messages.StatusFailed || st.StatusReason() != messages.ReasonCancelled {
		t.Errorf("the session's status is %q (%s), want the cancelled task's", status, st.StatusReason())
	}
}

// Under rules 9 nothing is recorded after a task's end: the late answer is
// refused, and the session stays as it was.
func TestLateAnswerIsRefusedUnderRules9(t *testing.T) {
	h := newHarness(t, harnessOpts{model: script(t, llm.ScriptStep{Content: "unused"})})
	key := recordCancelledWithCall(t, h, "late9", 9)
	res := h.answerLate(&actors.LateAnswer{SessionID: "late9", Key: key, Usage: messages.Usage{PromptTokens: 300}})
	if err, ok := res.(error); !ok || !errors.Is(err, actors.ErrNoLateCall) {
		t.Fatalf("the late answer of a rules 9 task was answered %v, want ErrNoLateCall", res)
	}
	events, err := h.log.Read(context.Background(), "late9", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 5 {
		t.Fatalf("the session has %d events, want its 5", len(events))
	}
}

// A session's failed task under rules 10 with a delegate call left unanswered
// lists the call among those waiting for their late answers (LateCalls), which a
// node re-arms when the session folds its log as it starts, until its late
// answer is recorded; under rules 9 none waits.
func TestLateCallsAreFoldedFromTheLog(t *testing.T) {
	h := newHarness(t, harnessOpts{model: script(t, llm.ScriptStep{Content: "unused"})})
	h9 := newHarness(t, harnessOpts{model: script(t, llm.ScriptStep{Content: "unused"})})
	key := recordCancelledWithCall(t, h, "late", actors.ContextRules)
	key9 := recordCancelledWithCall(t, h9, "late9", 9)
	fold := func(session string) *actors.SessionState {
		log := h.log
		if session == "late9" {
			log = h9.log
		}
		events, err := log.Read(context.Background(), session, 1)
		if err != nil {
			t.Fatal(err)
		}
		st := actors.NewSessionState(session)
		for _, e := range events {
			if err := st.Apply(e); err != nil {
				t.Fatal(err)
			}
		}
		return st
	}
	if got := fold("late").LateCalls(); len(got) != 1 || got[0] != key {
		t.Fatalf("the calls waiting: %v, want [%s]", got, key)
	}
	if got := fold("late9").LateCalls(); len(got) != 0 {
		t.Fatalf("the calls of a rules 9 task (%s) waiting: %v, want none", key9, got)
	}
	h.answerLate(&actors.LateAnswer{SessionID: "late", Key: key, Usage: messages.Usage{PromptTokens: 3}})
	if got := fold("late").LateCalls(); len(got) != 0 {
		t.Fatalf("the calls waiting once answered: %v, want none", got)
	}
}
