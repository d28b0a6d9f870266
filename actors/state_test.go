package actors_test

import (
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
)

func env(t *testing.T, p messages.Payload, session string, seq uint64, task string) messages.Envelope {
	t.Helper()
	e, err := messages.NewEnvelope(p)
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID, e.Seq, e.CorrelationID, e.Actor = session+"/"+string(rune('a'+seq)), session, seq, task, "test"
	if p.MessageType() == messages.TypeTaskSubmitted {
		e.ID = task
	}
	return e
}

func TestDecideIsPureAndFollowsTheLoop(t *testing.T) {
	agent := actors.Agent{Model: "m", Tools: []messages.ToolSpec{{Name: "calculator"}}, MaxSteps: 3}
	st := actors.NewSessionState("s")
	if d := st.Decide(agent, 1, 0); d != nil {
		t.Fatalf("an empty session decided %+v", d)
	}
	mustApply := func(e messages.Envelope) {
		t.Helper()
		if err := st.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	mustApply(env(t, &messages.TaskSubmitted{Input: "2+2"}, "s", 1, "task-1"))
	d1 := st.Decide(agent, 2, 0)
	d2 := st.Decide(agent, 2, 0)
	mr, ok := d1.Payload.(*messages.ModelRequested)
	if !ok || mr.Step != 1 || mr.Key != "s/2" {
		t.Fatalf("first decision: %+v", d1.Payload)
	}
	if mr2 := d2.Payload.(*messages.ModelRequested); mr2.PromptHash != mr.PromptHash {
		t.Fatal("the same state decided differently")
	}
	mustApply(env(t, mr, "s", 2, "task-1"))
	if d := st.Decide(agent, 3, 0); d != nil {
		t.Fatalf("waiting on the model, decided %+v", d.Payload)
	}
	mustApply(env(t, &messages.ModelResponded{Key: "s/2", Message: messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{
		{ID: "a", Name: "calculator", Arguments: `{"expression":"2+2"}`}, {ID: "b", Name: "nope", Arguments: `{}`},
	}}}, "s", 3, "task-1"))
	d := st.Decide(agent, 4, 0)
	r1 := d.Payload.(*messages.ToolCallRequested)
	mustApply(env(t, r1, "s", 4, "task-1"))
	r2 := st.Decide(agent, 5, 0).Payload.(*messages.ToolCallRequested)
	if r1.CallID != "a" || r2.CallID != "b" || r1.Key == r2.Key {
		t.Fatalf("tool requests: %+v %+v", r1, r2)
	}
	mustApply(env(t, r2, "s", 5, "task-1"))
	// The unknown tool is answered by the agent itself, without an effect.
	unknown := st.Decide(agent, 6, 0).Payload.(*messages.ToolCallCompleted)
	if unknown.CallID != "b" || unknown.Error == "" {
		t.Fatalf("unknown tool: %+v", unknown)
	}
	mustApply(env(t, unknown, "s", 6, "task-1"))
	if pc := st.PendingCalls(); len(pc) != 1 || pc[0].Request.CallID != "a" {
		t.Fatalf("pending calls: %+v", pc)
	}
	mustApply(env(t, &messages.ToolCallCompleted{Key: r1.Key, CallID: "a", Tool: "calculator", Result: "4"}, "s", 7, "task-1"))
	next := st.Decide(agent, 8, 0).Payload.(*messages.ModelRequested)
	if next.Step != 2 || next.Messages != 4 { // user, assistant, two tool results (no system prompt)
		t.Fatalf("second model request: %+v", next)
	}
}

func TestApplyRejectsGapsAndForeignEvents(t *testing.T) {
	st := actors.NewSessionState("s")
	if err := st.Apply(env(t, &messages.TaskSubmitted{Input: "x"}, "s", 2, "t")); err == nil {
		t.Fatal("a gap must be an error")
	}
	if err := st.Apply(env(t, &messages.TaskSubmitted{Input: "x"}, "other", 1, "t")); err == nil {
		t.Fatal("another session's event must be an error")
	}
}

// An effect request whose key is not an effect key of the session cannot be issued
// with its key: the log is corrupt.
func TestApplyRejectsForeignOrMalformedEffectKeys(t *testing.T) {
	for _, p := range []messages.Payload{
		&messages.ModelRequested{Key: "other/2", Model: "m", Step: 1},
		&messages.ModelRequested{Key: "s/02", Model: "m", Step: 1},
		&messages.ToolCallRequested{Key: "s", CallID: "c", Tool: "x"},
	} {
		st := actors.NewSessionState("s")
		if err := st.Apply(env(t, &messages.TaskSubmitted{Input: "x"}, "s", 1, "t")); err != nil {
			t.Fatal(err)
		}
		if err := st.Apply(env(t, p, "s", 2, "t")); err == nil {
			t.Errorf("%s %+v applied", p.MessageType(), p)
		}
	}
}

func TestStopConditions(t *testing.T) {
	agent := actors.Agent{Model: "m", MaxSteps: 1}
	st := actors.NewSessionState("s")
	_ = st.Apply(env(t, &messages.TaskSubmitted{Input: "x", DeadlineUS: 1000}, "s", 1, "t"))
	if f, ok := st.Decide(agent, 2, 1000).Payload.(*messages.TaskFailed); !ok || f.Reason != messages.ReasonDeadline {
		t.Fatalf("deadline: %+v", f)
	}
	mr := st.Decide(agent, 2, 999).Payload.(*messages.ModelRequested)
	_ = st.Apply(env(t, mr, "s", 2, "t"))
	_ = st.Apply(env(t, &messages.ModelResponded{Key: mr.Key, Message: messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: "a", Name: "x"}}}}, "s", 3, "t"))
	req := st.Decide(agent, 4, 0).Payload.(*messages.ToolCallRequested)
	_ = st.Apply(env(t, req, "s", 4, "t"))
	done := st.Decide(agent, 5, 0).Payload.(*messages.ToolCallCompleted)
	_ = st.Apply(env(t, done, "s", 5, "t"))
	if f, ok := st.Decide(agent, 6, 0).Payload.(*messages.TaskFailed); !ok || f.Reason != messages.ReasonMaxSteps {
		t.Fatalf("max steps: %+v", st.Decide(agent, 6, 0).Payload)
	}
}

// Tasks submitted while one runs wait their turn: the session stays running until the
// last one ended, and the fold (live, or on recovery) runs them in submission order.
func TestQueuedTasksKeepTheSessionRunningAndRunInOrder(t *testing.T) {
	agent := actors.Agent{Model: "m"}
	st := actors.NewSessionState("q")
	seq := uint64(0)
	apply := func(p messages.Payload, task string) {
		t.Helper()
		seq++
		if err := st.Apply(env(t, p, "q", seq, task)); err != nil {
			t.Fatal(err)
		}
	}
	tasks := []string{"task-1", "task-2", "task-3"}
	for i, id := range tasks {
		apply(&messages.TaskSubmitted{Input: fmt.Sprintf("input %d", i+1)}, id)
	}
	for i, id := range tasks {
		if got := st.Active(); got != id {
			t.Fatalf("task %d: the active task is %q, want %q", i+1, got, id)
		}
		if status, _, _ := st.Status(); status != messages.StatusRunning {
			t.Fatalf("task %d of %d running: status %q", i+1, len(tasks), status)
		}
		d := st.Decide(agent, seq+1, 0)
		mr, ok := d.Payload.(*messages.ModelRequested)
		if !ok || d.TaskID != id {
			t.Fatalf("task %d: decided %+v for %s", i+1, d.Payload, d.TaskID)
		}
		if req := st.Request(agent); req.Messages[len(req.Messages)-1].Content != fmt.Sprintf("input %d", i+1) {
			t.Fatalf("task %d: the model is asked about %q", i+1, req.Messages[len(req.Messages)-1].Content)
		}
		apply(mr, id)
		apply(&messages.ModelResponded{Key: mr.Key, Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: fmt.Sprintf("answer %d", i+1)}}, id)
		d = st.Decide(agent, seq+1, 0)
		if _, ok := d.Payload.(*messages.TaskCompleted); !ok || d.TaskID != id {
			t.Fatalf("task %d: decided %+v for %s", i+1, d.Payload, d.TaskID)
		}
		apply(d.Payload, id)
	}
	if status, out, _ := st.Status(); status != messages.StatusCompleted || out != "answer 3" || st.Active() != "" {
		t.Fatalf("all ended: status %q output %q active %q", status, out, st.Active())
	}
}
