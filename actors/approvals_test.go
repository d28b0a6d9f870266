package actors_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// testClock is a clock a test moves by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// approvalHarness runs sessions whose agent must have "send" approved; "calc" runs
// without. It counts the calls of send.
type approvalHarness struct {
	*harness
	sends   atomic.Int64
	timeout time.Duration
	clock   *testClock
}

func newApprovalHarness(t *testing.T, model llm.Model, timeout time.Duration) *approvalHarness {
	t.Helper()
	h := &approvalHarness{timeout: timeout, clock: &testClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}
	send := funcTool{name: "send", fn: func(context.Context, tools.Call) (string, error) {
		h.sends.Add(1)
		return "sent", nil
	}}
	calc := funcTool{name: "calc", fn: func(context.Context, tools.Call) (string, error) { return "4", nil }}
	h.harness = newHarness(t, harnessOpts{model: model, tools: []tools.Tool{send, calc}, deps: func(d *actors.SessionDeps) {
		d.Agent.Approvals = map[string]bool{"send": true}
		d.Agent.ApprovalTimeout = timeout
		d.Clock = h.clock
	}})
	return h
}

// agent is the agent the harness's sessions run, for Verify.
func (h *approvalHarness) agent(t *testing.T, model llm.Model) actors.Agent {
	reg, err := tools.NewRegistry(funcTool{name: "send"}, funcTool{name: "calc"})
	if err != nil {
		t.Fatal(err)
	}
	return actors.Agent{Model: model.Name(), SystemPrompt: "test", Tools: reg.Specs(),
		Approvals: map[string]bool{"send": true}, ApprovalTimeout: h.timeout}
}

// waitEvent polls the log until the session has an event of type typ and returns
// the session's events.
func (h *approvalHarness) waitEvent(session string, typ messages.Type, n int) []messages.Envelope {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		events, err := h.log.Read(context.Background(), session, 1)
		if err != nil {
			h.t.Fatal(err)
		}
		got := 0
		for _, e := range events {
			if e.Type == typ {
				got++
			}
		}
		if got >= n {
			return events
		}
		time.Sleep(2 * time.Millisecond)
	}
	events, _ := h.log.Read(context.Background(), session, 1)
	h.t.Fatalf("session %s: no %d× %s in 10 s; events: %s", session, n, typ, types(events))
	return nil
}

func (h *approvalHarness) resolve(session, call string, approve bool, reason string) (any, error) {
	return h.system.Root.RequestFuture(h.host, &actors.ResolveApproval{SessionID: session, Call: call, Approve: approve, Reason: reason, By: "test"},
		10*time.Second).Result()
}

func sendAndCalc() llm.ScriptStep {
	return calls(messages.ToolCall{ID: "c1", Name: "send", Arguments: `{"to":"bob"}`}, messages.ToolCall{ID: "c2", Name: "calc", Arguments: `{"expression":"2+2"}`})
}

// A call of a tool that needs approval waits, recorded, while the reply's other call
// runs; once approved, it runs once, and the task completes. A second answer is
// harmless: the same one is acknowledged as a duplicate, another one refused.
func TestApprovalApprovedRunsTheToolOnce(t *testing.T) {
	model := script(t, sendAndCalc(), llm.ScriptStep{Content: "done"})
	h := newApprovalHarness(t, model, 0)
	h.submit("ap-yes", "t1", "send it")
	events := h.waitEvent("ap-yes", messages.TypeToolCallCompleted, 1)
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted && decode[*messages.ToolCallCompleted](t, e).Tool != "calc" {
			t.Fatalf("a call completed before its approval: %s", e.Payload)
		}
	}
	req := firstOf[*messages.ApprovalRequested](t, h.waitEvent("ap-yes", messages.TypeApprovalRequested, 1), messages.TypeApprovalRequested)
	if req.CallID != "c1" || req.Tool != "send" || req.Arguments != `{"to":"bob"}` || req.ExpiresUS != 0 {
		t.Fatalf("approval requested: %+v", req)
	}
	if h.sends.Load() != 0 {
		t.Fatal("send ran before it was approved")
	}
	if res, err := h.resolve("ap-yes", "c1", true, "fine"); err != nil || res.(*actors.TaskAccepted).Duplicate {
		t.Fatalf("approve: %v %v", res, err)
	}
	events = h.wait("ap-yes")
	if events[len(events)-1].Type != messages.TypeTaskCompleted {
		t.Fatalf("events: %s", types(events))
	}
	if n := h.sends.Load(); n != 1 {
		t.Fatalf("send ran %d times, want 1", n)
	}
	if res, err := h.resolve("ap-yes", req.Key, true, ""); err != nil || !res.(*actors.TaskAccepted).Duplicate {
		t.Fatalf("the same answer again: %v %v", res, err)
	}
	if res, _ := h.resolve("ap-yes", req.Key, false, ""); !errors.Is(res.(error), actors.ErrApprovalNotPending) {
		t.Fatalf("another answer after the first: %v", res)
	}
	if n := h.sends.Load(); n != 1 {
		t.Fatalf("send ran %d times after the duplicate answers, want 1", n)
	}
	assertGapFree(t, events)
	verifyDeterministic(t, h.agent(t, model), events)
}

// A rejected call is answered with the rejection, which the model reads as the
// tool's result; the task then completes.
func TestApprovalRejectedGoesBackToTheModel(t *testing.T) {
	rec := &requestRecorder{Model: script(t, sendAndCalc(), llm.ScriptStep{Content: "I did not send it"})}
	h := newApprovalHarness(t, rec, 0)
	h.submit("ap-no", "t1", "send it")
	h.waitEvent("ap-no", messages.TypeApprovalRequested, 1)
	if res, _ := h.resolve("ap-no", "c9", false, ""); !errors.Is(res.(error), actors.ErrApprovalNotPending) || !strings.Contains(res.(error).Error(), "c1") {
		t.Fatalf("an answer for a call that does not wait: %v", res)
	}
	if _, err := h.resolve("ap-no", "c1", false, "not to bob"); err != nil {
		t.Fatal(err)
	}
	events := h.wait("ap-no")
	if last := decode[*messages.TaskCompleted](t, events[len(events)-1]); last.Output != "I did not send it" {
		t.Fatalf("output %q", last.Output)
	}
	if h.sends.Load() != 0 {
		t.Fatal("a rejected call ran")
	}
	var rejected *messages.ToolCallCompleted
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted {
			if c := decode[*messages.ToolCallCompleted](t, e); c.Tool == "send" {
				rejected = c
			}
		}
	}
	if rejected == nil || rejected.Error != "rejected by a human: not to bob" {
		t.Fatalf("the rejected call's result: %+v", rejected)
	}
	last := rec.last()
	found := false
	for _, m := range last.Messages {
		found = found || (m.Role == messages.RoleTool && m.ToolCallID == "c1" && m.Content == "error: rejected by a human: not to bob")
	}
	if !found {
		t.Fatalf("the model was not given the rejection: %+v", last.Messages)
	}
	verifyDeterministic(t, h.agent(t, rec), events)
}

// An approval nobody answers before its timeout is rejected by the session, judged
// with the session's clock.
func TestApprovalTimesOut(t *testing.T) {
	model := script(t, sendAndCalc(), llm.ScriptStep{Content: "timed out"})
	h := newApprovalHarness(t, model, 10*time.Minute)
	h.submit("ap-late", "t1", "send it")
	events := h.waitEvent("ap-late", messages.TypeApprovalRequested, 1)
	req := firstOf[*messages.ApprovalRequested](t, events, messages.TypeApprovalRequested)
	if want := h.clock.Now().Add(10 * time.Minute).UnixMicro(); req.ExpiresUS != want {
		t.Fatalf("expires at %d, want %d", req.ExpiresUS, want)
	}
	// Before the expiry, waking the session changes nothing.
	h.clock.advance(9 * time.Minute)
	h.system.Root.Send(h.host, &actors.ResumeSession{SessionID: "ap-late"})
	// An answer for another call is handled after the wake-up, and records nothing.
	if r, _ := h.resolve("ap-late", "c2", true, ""); !errors.Is(r.(error), actors.ErrApprovalNotPending) {
		t.Fatalf("an answer for a call that needs none: %v", r)
	}
	early, _ := h.log.Read(context.Background(), "ap-late", 1)
	for _, e := range early {
		if e.Type == messages.TypeApprovalResolved {
			t.Fatalf("rejected before its expiry: %s", types(early))
		}
	}
	// Past the expiry, an answer that comes before the wake-up is too late.
	h.clock.advance(2 * time.Minute)
	if r, _ := h.resolve("ap-late", "c1", true, ""); !errors.Is(r.(error), actors.ErrApprovalNotPending) || !strings.Contains(r.(error).Error(), "timeout") {
		t.Fatalf("an answer after the expiry: %v", r)
	}
	events = h.wait("ap-late")
	var res *messages.ApprovalResolved
	for _, e := range events {
		if e.Type == messages.TypeApprovalResolved {
			res = decode[*messages.ApprovalResolved](t, e)
		}
	}
	if res == nil || res.Approve || res.By != messages.ApprovedByTimeout {
		t.Fatalf("resolution: %+v; events %s", res, types(events))
	}
	if h.sends.Load() != 0 {
		t.Fatal("an expired call ran")
	}
	verifyDeterministic(t, h.agent(t, model), events)
}

// firstOf decodes the first event of type typ.
func firstOf[T messages.Payload](t *testing.T, events []messages.Envelope, typ messages.Type) T {
	t.Helper()
	for _, e := range events {
		if e.Type == typ {
			return decode[T](t, e)
		}
	}
	t.Fatalf("no %s among %s", typ, types(events))
	var zero T
	return zero
}

// requestRecorder keeps the requests a model was sent.
type requestRecorder struct {
	llm.Model
	mu   sync.Mutex
	reqs []llm.Request
}

func (r *requestRecorder) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.Model.Generate(ctx, req)
}

func (r *requestRecorder) last() llm.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reqs[len(r.reqs)-1]
}
