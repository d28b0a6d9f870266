//go:build review

package actors_test

import (
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// A model gives two calls that need approval the same call ID. A person approves
// call "x" (the first, to bob); the same answer sent again (an HTTP retry, which
// the API acknowledges as a duplicate when the IDs are unique) approves the other
// call, to mallory, which nobody looked at.
func TestApprovalRetryByASharedCallIDApprovesNoOtherCall(t *testing.T) {
	model := script(t, calls(
		messages.ToolCall{ID: "x", Name: "send", Arguments: `{"to":"bob"}`},
		messages.ToolCall{ID: "x", Name: "send", Arguments: `{"to":"mallory"}`}),
		llm.ScriptStep{Content: "done"})
	h := newApprovalHarness(t, model, 0)
	h.submit("dup", "t1", "send it")
	h.waitEvent("dup", messages.TypeApprovalRequested, 2)
	if res, err := h.resolve("dup", "x", true, "bob is fine"); err != nil {
		t.Fatalf("approve: %v %v", res, err)
	}
	res, err := h.resolve("dup", "x", true, "bob is fine") // the same answer, retried
	if acc, ok := res.(*actors.TaskAccepted); err == nil && ok && !acc.Duplicate {
		t.Fatalf("the retried answer to call x approved the other call of that ID (to mallory)")
	}
}
