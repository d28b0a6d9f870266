package actors_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// steppingClock is a clock that moves on by step each time it is read, once step
// is set: time that passes while a session handles one message.
type steppingClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *steppingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now
	c.now = c.now.Add(c.step)
	return now
}

func (c *steppingClock) set(now time.Time, step time.Duration) {
	c.mu.Lock()
	c.now, c.step = now, step
	c.mu.Unlock()
}

// An answer that comes a microsecond before its approval expires is judged and
// recorded at one instant: in time, it is recorded before the expiry (the clock
// moving on while the session handles it must not record, at or past the
// expiry, an answer it took for in time). Replay verification agrees.
func TestApprovalAnswerAtTheExpiryIsRecordedWhenJudged(t *testing.T) {
	model := script(t, sendAndCalc(), llm.ScriptStep{Content: "done"})
	clock := &steppingClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	h := &approvalHarness{timeout: 10 * time.Minute, clock: &testClock{}}
	send := funcTool{name: "send", fn: func(context.Context, tools.Call) (string, error) {
		h.sends.Add(1)
		return "sent", nil
	}}
	calc := funcTool{name: "calc", fn: func(context.Context, tools.Call) (string, error) { return "4", nil }}
	h.harness = newHarness(t, harnessOpts{model: model, tools: []tools.Tool{send, calc}, deps: func(d *actors.SessionDeps) {
		d.Agent.Approvals = map[string]bool{"send": true}
		d.Agent.ApprovalTimeout = h.timeout
		d.Clock = clock
	}})
	h.submit("ap-edge", "t1", "send it")
	req := firstOf[*messages.ApprovalRequested](t, h.waitEvent("ap-edge", messages.TypeApprovalRequested, 1), messages.TypeApprovalRequested)
	// The reply's other call (calc) runs meanwhile; its result is recorded, and the
	// approval's wake-up armed again, at reads of the clock too. Set the clock once
	// the session has handled it (an answer to no pending call, which the session
	// handles after it, has been refused), so that the answer's judging is the next
	// read.
	h.waitEvent("ap-edge", messages.TypeToolCallCompleted, 1)
	if _, err := h.resolve("ap-edge", "c2", true, "not pending"); err != nil {
		t.Fatal(err)
	}
	clock.set(time.UnixMicro(req.ExpiresUS-1), time.Microsecond)
	res, err := h.resolve("ap-edge", "c1", true, "just in time")
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := res.(error); ok {
		t.Fatalf("the answer: %v", e)
	}
	events := h.wait("ap-edge")
	for _, e := range events {
		if e.Type == messages.TypeApprovalResolved {
			r := decode[*messages.ApprovalResolved](t, e)
			if r.By != messages.ApprovedByTimeout && e.TS >= req.ExpiresUS {
				t.Errorf("the answer %s was taken for in time and recorded at %d, %dµs past the approval's expiry %d", e.Payload, e.TS, e.TS-req.ExpiresUS, req.ExpiresUS)
			}
		}
	}
	verifyDeterministic(t, h.agent(t, model), events)
}
