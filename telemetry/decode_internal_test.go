package telemetry

import (
	"reflect"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// TestSpanPayloadReadsWhatDecodeReads: for each event the spans follow, with every
// field set, spanPayload gives the fields the spans read as the whole decode
// (messages.Envelope.Decode) gives them, and leaves the others unset. A JSON name
// mistyped in spanPayload, or a field renamed in messages, fails it.
func TestSpanPayloadReadsWhatDecodeReads(t *testing.T) {
	usage := messages.Usage{PromptTokens: 40, CompletionTokens: 9, CachedTokens: 3, CostUSD: 0.25}
	parent := &messages.ParentRef{SessionID: "parent-1", Key: "parent-1/4", Depth: 1}
	call := messages.ToolCall{ID: "call_1", Name: "ledger", Arguments: `{"amount":7}`}
	cases := []struct {
		full messages.Payload
		want any
	}{
		{&messages.TaskSubmitted{Input: "pay 7", Agent: "payer", Model: "m", MaxSteps: 3, Parent: parent, TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			&messages.TaskSubmitted{Agent: "payer", Model: "m", Parent: parent, TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
		{&messages.ModelRequested{Key: "s/2", Model: "m", Step: 2, Messages: 5, PromptHash: "h", Tools: []string{"ledger"}, Purpose: "plan"},
			&messages.ModelRequested{Key: "s/2", Model: "m", Step: 2, Purpose: "plan"}},
		{&messages.ModelResponded{Key: "s/2", Model: "backup", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "x", ToolCalls: []messages.ToolCall{call}},
			Usage: usage, LatencyUS: 9, Error: "", Cached: true},
			&answered{ModelResponded: messages.ModelResponded{Key: "s/2", Model: "backup", Usage: usage, Cached: true}, asksTools: true}},
		{&messages.ModelResponded{Key: "s/3", Model: "m", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "done"}, Error: "down"},
			&answered{ModelResponded: messages.ModelResponded{Key: "s/3", Model: "m", Error: "down"}}},
		{&messages.ToolCallRequested{Key: "s/4", CallID: "call_1", Tool: "ledger", Arguments: `{"amount":7}`, Step: 1, Purpose: "step"},
			&messages.ToolCallRequested{Key: "s/4", CallID: "call_1", Tool: "ledger", Step: 1, Purpose: "step"}},
		{&messages.ToolCallCompleted{Key: "s/4", CallID: "call_1", Tool: "ledger", Result: "paid", Error: "late", LatencyUS: 4},
			&messages.ToolCallCompleted{Key: "s/4", Error: "late"}},
		{&messages.ApprovalRequested{Key: "s/4", CallID: "call_1", Tool: "ledger", Arguments: "{}", ExpiresUS: 7},
			&messages.ApprovalRequested{Key: "s/4"}},
		{&messages.ApprovalResolved{Key: "s/4", Approve: true, Reason: "ok", By: "api"},
			&messages.ApprovalResolved{Key: "s/4", Approve: true, By: "api"}},
		{&messages.TaskCompleted{Output: "paid", Steps: 2, Usage: usage, Note: "n"},
			&messages.TaskCompleted{Steps: 2, Usage: usage}},
		{&messages.TaskFailed{Reason: messages.ReasonCancelled, Error: "by user", Steps: 1, Usage: usage},
			&messages.TaskFailed{Reason: messages.ReasonCancelled, Error: "by user", Steps: 1, Usage: usage}},
	}
	for _, c := range cases {
		e, err := messages.NewEnvelope(c.full)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := spanPayload(&e)
		if !ok {
			t.Errorf("%s: spanPayload refused %s", e.Type, e.Payload)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: spanPayload gave %+v, want %+v", e.Type, got, c.want)
		}
	}
	if _, ok := spanPayload(&messages.Envelope{Type: messages.TypeModelRequested, Payload: []byte(`{"key":`)}); ok {
		t.Error("a payload that does not decode was taken")
	}
	if _, ok := spanPayload(&messages.Envelope{Type: "note.added", Payload: []byte(`{}`)}); ok {
		t.Error("an event the spans do not follow was taken")
	}
}
