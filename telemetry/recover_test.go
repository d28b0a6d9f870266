package telemetry_test

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/telemetry"
)

// A session resumed with a task running and a task queued behind it that failed
// at its deadline (decision rules 10) starts the running task's span again, with
// its unanswered model call's: the history's last event is the queued task's
// task.failed, which read as "no running task", and the resumed task had no span.
func TestRecoverResumesTheRunningTaskPastAQueuedOnesEnd(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := telemetry.NewSessions(tp.Tracer("t"), 0)
	var (
		events []messages.Envelope
		seq    uint64
	)
	add := func(task string, p messages.Payload) {
		t.Helper()
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.SessionID, e.Seq = "s1", seq+1
		e.ID = "s1/" + string(rune('a'+seq))
		seq++
		if _, ok := p.(*messages.TaskSubmitted); ok {
			task = e.ID
		}
		e.CorrelationID = task
		events = append(events, e)
	}
	add("", &messages.TaskSubmitted{Input: "long", Agent: "worker"})                                        // s1/a, running
	add("s1/a", &messages.ModelRequested{Key: "s1/b", Step: 1})                                             // unanswered
	add("", &messages.TaskSubmitted{Input: "quick", Agent: "other", DeadlineUS: 1})                         // s1/c, queued
	add("s1/c", &messages.TaskFailed{Reason: messages.ReasonDeadline, Error: "the task's deadline passed"}) // its end
	s.Recover("s1", events)
	if s.Open() != 1 {
		t.Fatalf("%d sessions open after Recover, want the running task's", s.Open())
	}
	events = nil // what the session records next
	add("s1/a", &messages.ModelResponded{Key: "s1/b", Model: "m", Message: messages.ChatMessage{Content: "done"}})
	add("s1/a", &messages.TaskCompleted{Output: "done", Steps: 1})
	s.Observe("s1", events)
	spans := recorded(rec)
	if spans["invoke_agent worker"] == nil || spans["chat m"] == nil {
		t.Fatalf("spans %v, want the resumed task's and its model call's", spans)
	}
	if spans["invoke_agent other"] != nil {
		t.Errorf("the queued task that ended got a span on Recover")
	}
}
