package actors_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// A model gives two calls that need approval the same call ID. An answer by that
// ID is refused, naming the calls' keys: it could approve a call nobody looked at
// (the answer to call "x", to bob, sent twice approved the call to mallory too).
// An answer by key approves that call only.
func TestApprovalByACallIDSharedInOneReplyIsRefused(t *testing.T) {
	model := script(t, calls(
		messages.ToolCall{ID: "x", Name: "send", Arguments: `{"to":"bob"}`},
		messages.ToolCall{ID: "x", Name: "send", Arguments: `{"to":"mallory"}`}),
		llm.ScriptStep{Content: "done"})
	h := newApprovalHarness(t, model, 0)
	h.submit("dup", "t1", "send it")
	events := h.waitEvent("dup", messages.TypeApprovalRequested, 2)
	var keys []string
	for _, e := range events {
		if e.Type == messages.TypeApprovalRequested {
			keys = append(keys, decode[*messages.ApprovalRequested](t, e).Key)
		}
	}
	for range 2 { // an answer, and its retry
		res, err := h.resolve("dup", "x", true, "bob is fine")
		if e, ok := res.(error); err != nil || !ok || !errors.Is(e, actors.ErrApprovalNotPending) || !strings.Contains(e.Error(), keys[0]+", "+keys[1]) {
			t.Fatalf("an answer by the shared call ID: %v %v", res, err)
		}
	}
	if res, err := h.resolve("dup", keys[0], true, "bob is fine"); err != nil {
		t.Fatalf("approve by key: %v %v", res, err)
	} else if acc, ok := res.(*actors.TaskAccepted); !ok || acc.Duplicate {
		t.Fatalf("approve by key: %v", res)
	}
	h.waitEvent("dup", messages.TypeApprovalResolved, 1)
	if res, err := h.resolve("dup", keys[0], true, ""); err != nil || !res.(*actors.TaskAccepted).Duplicate {
		t.Fatalf("the same answer by key again: %v %v", res, err)
	}
	if res, err := h.resolve("dup", keys[1], false, "not mallory"); err != nil {
		t.Fatalf("reject by key: %v %v", res, err)
	}
	events = h.wait("dup")
	if n := h.sends.Load(); n != 1 {
		t.Fatalf("send ran %d times, want 1 (bob's)", n)
	}
	verifyDeterministic(t, h.agent(t, model), events)
}

// A model reuses a call ID from one reply to the next (and from task to task). The
// answer by that ID to the first call, sent again once the next call waits (a
// client's retry, a redelivery), approved the next call, which nobody looked at:
// an answer by an ID that names an earlier call of the session too is refused,
// naming both keys, and the next call waits for its answer by key. The very
// answer the first call took is refused too (a *ReusedCallIDError, Taken): it may
// be meant for the next call, whose client, told it was taken, would believe that
// call answered.
func TestApprovalRetriedByAReusedCallIDDoesNotApproveTheNextCall(t *testing.T) {
	model := script(t,
		calls(messages.ToolCall{ID: "x", Name: "send", Arguments: `{"to":"bob"}`}),
		calls(messages.ToolCall{ID: "x", Name: "send", Arguments: `{"to":"mallory"}`}),
		calls(messages.ToolCall{ID: "x", Name: "send", Arguments: `{"to":"eve"}`}),
		llm.ScriptStep{Content: "done"})
	h := newApprovalHarness(t, model, 0)
	h.submit("reuse", "t1", "send it")
	h.waitEvent("reuse", messages.TypeApprovalRequested, 1)
	if res, err := h.resolve("reuse", "x", true, "bob is fine"); err != nil {
		t.Fatalf("approve bob: %v", err)
	} else if acc, ok := res.(*actors.TaskAccepted); !ok || acc.Duplicate {
		t.Fatalf("approve bob: %v", res)
	}
	events := h.waitEvent("reuse", messages.TypeApprovalRequested, 2)
	var keys []string
	for _, e := range events {
		if e.Type == messages.TypeApprovalRequested {
			keys = append(keys, decode[*messages.ApprovalRequested](t, e).Key)
		}
	}
	res, err := h.resolve("reuse", "x", true, "bob is fine") // the retry
	var reused *actors.ReusedCallIDError
	if e, ok := res.(error); err != nil || !ok || !errors.As(e, &reused) || !errors.Is(e, actors.ErrApprovalNotPending) ||
		!reused.Taken || reused.Earlier != keys[0] || reused.Waiting != keys[1] ||
		!strings.Contains(e.Error(), keys[0]) || !strings.Contains(e.Error(), keys[1]) || !strings.Contains(e.Error(), "nothing was done") {
		t.Fatalf("the first answer again, once the next call waits: %v %v; want it refused, taken for %s, %s waiting", res, err, keys[0], keys[1])
	}
	if n := h.sends.Load(); n != 1 {
		t.Fatalf("send ran %d times, want 1 (bob's): the retry approved mallory's call", n)
	}
	// Another answer by the ID is refused too: it may be a second human's to bob's
	// call, or a late one.
	if res, err := h.resolve("reuse", "x", false, "not bob"); err != nil || !errors.Is(res.(error), actors.ErrApprovalNotPending) {
		t.Fatalf("the other answer by the reused call ID: %v %v", res, err)
	}
	if res, err := h.resolve("reuse", keys[1], false, "not mallory"); err != nil {
		t.Fatalf("reject mallory by key: %v", err)
	} else if acc, ok := res.(*actors.TaskAccepted); !ok || acc.Duplicate {
		t.Fatalf("reject mallory by key: %v", res)
	}
	events = h.waitEvent("reuse", messages.TypeApprovalRequested, 3)
	keys = keys[:0]
	for _, e := range events {
		if e.Type == messages.TypeApprovalRequested {
			keys = append(keys, decode[*messages.ApprovalRequested](t, e).Key)
		}
	}
	if res, err := h.resolve("reuse", keys[2], true, "eve is fine"); err != nil {
		t.Fatalf("approve eve by key: %v", err)
	} else if acc, ok := res.(*actors.TaskAccepted); !ok || acc.Duplicate {
		t.Fatalf("approve eve by key: %v", res)
	}
	events = h.wait("reuse")
	if n := h.sends.Load(); n != 2 {
		t.Fatalf("send ran %d times, want 2 (bob's and eve's)", n)
	}
	verifyDeterministic(t, h.agent(t, model), events)
}

// A call ID is the model's, any string: one may be the key of another call of the
// same reply (keys are the session and a seq, which a model steered by what it read
// can guess). An answer by that key, as the dashboard sends it, approved the call
// whose ID it was when that call came first, not the call the human looked at;
// and the same answer again, once that call was answered, approved the other. A
// key names its own call.
func TestApprovalByKeyIsNotTakenForAnotherCallsID(t *testing.T) {
	// The reply's calls are recorded at seqs 4 and 5: keys kid/4 and kid/5.
	model := script(t, calls(
		messages.ToolCall{ID: "kid/5", Name: "send", Arguments: `{"to":"mallory"}`},
		messages.ToolCall{ID: "c2", Name: "send", Arguments: `{"to":"bob"}`}),
		llm.ScriptStep{Content: "done"})
	h := newApprovalHarness(t, model, 0)
	h.submit("kid", "t1", "send it")
	h.waitEvent("kid", messages.TypeApprovalRequested, 2)
	for range 2 { // the answer, and its retry
		if res, err := h.resolve("kid", "kid/5", true, "bob is fine"); err != nil {
			t.Fatalf("approve bob's call by key: %v", err)
		} else if _, ok := res.(*actors.TaskAccepted); !ok {
			t.Fatalf("approve bob's call by key: %v", res)
		}
	}
	events := h.waitEvent("kid", messages.TypeApprovalResolved, 1)
	var resolved []string
	for _, e := range events {
		if e.Type == messages.TypeApprovalResolved {
			resolved = append(resolved, decode[*messages.ApprovalResolved](t, e).Key)
		}
	}
	if len(resolved) != 1 || resolved[0] != "kid/5" {
		t.Fatalf("the answers by key kid/5 resolved %v, want [kid/5] (bob's call)", resolved)
	}
	if res, err := h.resolve("kid", "kid/4", false, "not mallory"); err != nil {
		t.Fatalf("reject mallory's call by key: %v", err)
	} else if _, ok := res.(*actors.TaskAccepted); !ok {
		t.Fatalf("reject mallory's call by key: %v", res)
	}
	events = h.wait("kid")
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted {
			if c := decode[*messages.ToolCallCompleted](t, e); c.Result == "sent" && c.Key != "kid/5" {
				t.Fatalf("call %s (%s) was sent; want only kid/5, bob's", c.Key, c.CallID)
			}
		}
	}
	if n := h.sends.Load(); n != 1 {
		t.Fatalf("send ran %d times, want 1 (bob's)", n)
	}
	verifyDeterministic(t, h.agent(t, model), events)
}

// A call ID shaped as a key of the session names no call by its ID: taken by ID
// while no approval sat at that seq, the same answer sent again once a later
// call got that key would approve that call, which nobody looked at. It is a
// key, of a call that is not there yet: refused, the refusal naming the calls
// waiting by key.
func TestApprovalByACallIDShapedAsAKeyIsAKey(t *testing.T) {
	model := script(t, calls(messages.ToolCall{ID: "rv/10", Name: "send", Arguments: `{"to":"bob"}`}),
		llm.ScriptStep{Content: "done"})
	h := newApprovalHarness(t, model, 0)
	h.submit("rv", "t1", "send it")
	events := h.waitEvent("rv", messages.TypeApprovalRequested, 1)
	var key string
	for _, e := range events {
		if e.Type == messages.TypeApprovalRequested {
			key = decode[*messages.ApprovalRequested](t, e).Key
		}
	}
	res, err := h.resolve("rv", "rv/10", true, "bob is fine")
	if e, ok := res.(error); err != nil || !ok || !errors.Is(e, actors.ErrApprovalNotPending) || !strings.Contains(e.Error(), key+" (call ID rv/10)") {
		t.Fatalf("an answer by the call ID rv/10, a key of the session: %v %v; want it refused, naming %s by key", res, err, key)
	}
	if n := h.sends.Load(); n != 0 {
		t.Fatalf("send ran %d times before any answer by key", n)
	}
	if res, err := h.resolve("rv", key, true, "bob is fine"); err != nil {
		t.Fatalf("approve by key: %v", err)
	} else if acc, ok := res.(*actors.TaskAccepted); !ok || acc.Duplicate {
		t.Fatalf("approve by key: %v", res)
	}
	events = h.wait("rv")
	if n := h.sends.Load(); n != 1 {
		t.Fatalf("send ran %d times, want 1", n)
	}
	verifyDeterministic(t, h.agent(t, model), events)
}
