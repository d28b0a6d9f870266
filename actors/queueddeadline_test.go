package actors_test

import (
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
)

// queuedBehindRunning folds a session whose first task waits for the model and
// whose second, recorded under rules, waits its turn with a deadline at 1000 µs.
func queuedBehindRunning(t *testing.T, rules int) (*actors.SessionState, func(messages.Payload, string, int64) messages.Envelope) {
	t.Helper()
	st := actors.NewSessionState("qd")
	var seq uint64
	apply := func(p messages.Payload, task string, ts int64) messages.Envelope {
		t.Helper()
		seq++
		e := env(t, p, "qd", seq, task)
		e.TS = ts
		if err := st.Apply(e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	apply(&messages.TaskSubmitted{Input: "slow", Rules: actors.ContextRules}, "task-1", 1)
	d := st.Decide(actors.Agent{Model: "m"}, seq+1, 2)
	apply(d.Payload, "task-1", 2)
	apply(&messages.TaskSubmitted{Input: "quick", Rules: rules, DeadlineUS: 1000}, "task-2", 3)
	return st, apply
}

// Under rules 10 a task waiting its turn fails at its own deadline, with no steps
// and no usage, while the running task goes on; the session stays running, and
// once the running task ends its status is that task's, whose end is the latest.
func TestQueuedTaskFailsAtItsDeadlineUnderRules10(t *testing.T) {
	agent := actors.Agent{Model: "m"}
	st, apply := queuedBehindRunning(t, actors.ContextRules)
	if d := st.Decide(agent, 5, 999); d != nil {
		t.Fatalf("before the queued task's deadline: decided %T %+v", d.Payload, d.Payload)
	}
	if next := st.NextDeadline(); next != 1000 {
		t.Errorf("NextDeadline = %d, want the queued task's 1000", next)
	}
	d := st.Decide(agent, 5, 1000)
	f, ok := d.Payload.(*messages.TaskFailed)
	if !ok || d.TaskID != "task-2" || d.CausationID != "task-2" || f.Reason != messages.ReasonDeadline || f.Steps != 0 || !f.Usage.IsZero() || !f.SubAgentsUsage.IsZero() {
		t.Fatalf("at the queued task's deadline: decided %+v for %s (caused by %s)", d.Payload, d.TaskID, d.CausationID)
	}
	events := []messages.Envelope{}
	events = append(events, apply(f, "task-2", 1000))
	if st.Active() != "task-1" {
		t.Fatalf("the running task is %q, want task-1 going on", st.Active())
	}
	if status, _, _ := st.Status(); status != messages.StatusRunning {
		t.Errorf("the session's status is %q with task-1 running", status)
	}
	if status, _, errMsg, _ := st.Task("task-2"); status != messages.StatusFailed || errMsg == "" {
		t.Errorf("task-2: %q %q", status, errMsg)
	}
	if d := st.Decide(agent, 6, 2000); d != nil {
		t.Fatalf("with task-1 waiting for its model: decided %T %+v", d.Payload, d.Payload)
	}
	key, _, _ := st.PendingModel()
	apply(&messages.ModelResponded{Key: key.String(), Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "done"}}, "task-1", 2001)
	d = st.Decide(agent, 7, 2002)
	if _, ok := d.Payload.(*messages.TaskCompleted); !ok || d.TaskID != "task-1" {
		t.Fatalf("task-1 answered: decided %+v for %s", d.Payload, d.TaskID)
	}
	apply(d.Payload, "task-1", 2002)
	if status, out, _ := st.Status(); status != messages.StatusCompleted || out != "done" || st.StatusTask() != "task-1" || st.StatusReason() != "" {
		t.Errorf("all ended: status %q output %q task %q reason %q; want task-1's, whose end is the latest", status, out, st.StatusTask(), st.StatusReason())
	}
	if st.Active() != "" {
		t.Errorf("the failed queued task was started: active %q", st.Active())
	}
}

// Under rules 9 a task waiting its turn waits past its deadline, and fails at it
// only once it starts: a session recorded under 9 decides as it did.
func TestQueuedTaskWaitsPastItsDeadlineUnderRules9(t *testing.T) {
	agent := actors.Agent{Model: "m"}
	st, apply := queuedBehindRunning(t, 9)
	if d := st.Decide(agent, 5, 5000); d != nil {
		t.Fatalf("rules 9: decided %T %+v for %s past the queued task's deadline", d.Payload, d.Payload, d.TaskID)
	}
	if next := st.NextDeadline(); next != 0 {
		t.Errorf("rules 9: NextDeadline = %d, want 0 (the running task has none)", next)
	}
	key, _, _ := st.PendingModel()
	apply(&messages.ModelResponded{Key: key.String(), Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "done"}}, "task-1", 5001)
	d := st.Decide(agent, 6, 5002)
	apply(d.Payload, "task-1", 5002)
	d = st.Decide(agent, 7, 5003)
	if f, ok := d.Payload.(*messages.TaskFailed); !ok || d.TaskID != "task-2" || f.Reason != messages.ReasonDeadline || f.Error == "" {
		t.Fatalf("rules 9, task-2 started: decided %+v for %s", d.Payload, d.TaskID)
	}
}
