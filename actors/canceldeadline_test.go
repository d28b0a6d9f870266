package actors_test

import (
	"errors"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// A cancellation that comes after the running task's deadline passed, before the
// session's wake-up for it did, finds the task failed at its deadline: the task
// ends with reason deadline (what happened first), the cancellation is answered
// ErrNoRunningTask, as one after the task's end is. Replay verification agrees.
func TestCancelPastTheDeadlineFindsTheTaskFailedAtIt(t *testing.T) {
	gate := &gatedModel{Model: script(t, llm.ScriptStep{Content: "late"}), started: make(chan string, 4), release: make(chan struct{}), calls: map[string]int{}}
	defer close(gate.release)
	clock := &testClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	h := newHarness(t, harnessOpts{model: gate, deps: func(d *actors.SessionDeps) { d.Clock = clock }})
	deadline := clock.Now().Add(time.Hour).UnixMicro()
	h.submitTask("busy-late", "t1", &messages.TaskSubmitted{Input: "think", DeadlineUS: deadline})
	<-gate.started
	clock.advance(2 * time.Hour) // the wake-up is an hour of real time away
	res, err := h.system.Root.RequestFuture(h.host, &actors.CancelTask{SessionID: "busy-late", Reason: "too slow"}, 10*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	events := h.wait("busy-late")
	f := failure(t, events)
	if f.Reason != messages.ReasonDeadline {
		t.Errorf("the task failed with %s (%s), want %s: its deadline passed an hour before the cancellation came", f.Reason, f.Error, messages.ReasonDeadline)
	}
	if e, ok := res.(error); !ok || !errors.Is(e, actors.ErrNoRunningTask) {
		t.Errorf("the cancellation was answered %v, want ErrNoRunningTask", res)
	}
	verifyDeterministic(t, actors.Agent{Model: gate.Name(), SystemPrompt: "test"}, events)
}
