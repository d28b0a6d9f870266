package actors

import (
	"reflect"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// A session folds the events it encodes itself with their payloads (applyEncoded)
// instead of decoding them; the state must be exactly the one a refold of the log
// (Apply, as recovery and replay do) gives, also for payloads whose encoding is lossy.
func TestApplyEncodedFoldsAsApply(t *testing.T) {
	call := messages.ToolCall{ID: "c1", Name: "calculator", Arguments: `{"expression":"1+1"}`}
	histories := map[string][]messages.Payload{
		"plain": {
			&messages.TaskSubmitted{Input: "What is 1+1? <b>&</b>"},
			&messages.ModelRequested{Key: effectKey("s", 2), Model: "m", Step: 1, Messages: 2, PromptHash: "h"},
			&messages.ModelResponded{Key: effectKey("s", 2), Model: "m", Message: messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{call}},
				Usage: messages.Usage{PromptTokens: 10, CompletionTokens: 3, CostUSD: 0.1 + 0.2}},
			&messages.ToolCallRequested{Key: effectKey("s", 4), CallID: "c1", Tool: "calculator", Arguments: call.Arguments, Step: 1},
			&messages.ToolCallCompleted{Key: effectKey("s", 4), CallID: "c1", Tool: "calculator", Result: "2"},
			&messages.ModelRequested{Key: effectKey("s", 6), Model: "m", Step: 2, Messages: 4, PromptHash: "h2"},
			&messages.ModelResponded{Key: effectKey("s", 6), Model: "m", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "2\u2028"}},
			&messages.TaskCompleted{Output: "2\u2028", Steps: 2},
		},
		"lossy": {
			&messages.TaskSubmitted{Input: "bad \xff utf-8"},
			&messages.ModelRequested{Key: effectKey("s", 2), Model: "m", Step: 1, Messages: 2, PromptHash: "h", Tools: []string{}},
			&messages.ModelResponded{Key: effectKey("s", 2), Model: "m", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "x\xc3", ToolCalls: []messages.ToolCall{}}},
			&messages.TaskFailed{Reason: messages.ReasonModelError, Error: "\xfe"},
		},
	}
	for name, payloads := range histories {
		t.Run(name, func(t *testing.T) {
			live, refold := NewSessionState("s"), NewSessionState("s")
			for i, p := range payloads {
				e, err := messages.NewEnvelope(p)
				if err != nil {
					t.Fatal(err)
				}
				seq := uint64(i + 1)
				e.ID, e.SessionID, e.Seq, e.TS, e.CorrelationID = effectKey("s", seq), "s", seq, int64(seq), effectKey("s", 1)
				if err := live.applyEncoded(e, p); err != nil {
					t.Fatal(err)
				}
				if err := refold.Apply(e); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(live, refold) {
					t.Fatalf("after event %d (%s) the states differ:\nlive   %+v\nrefold %+v", seq, e.Type, live, refold)
				}
			}
		})
	}
}
