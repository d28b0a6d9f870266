package main

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// A tool's name is the model's text: replay show keeps a made-up one with newlines,
// or thousands of characters, to its event's line, as it does arguments.
func TestSummaryKeepsToolNamesOnTheLine(t *testing.T) {
	forged := "fake\n    9 task.completed   session            completed: forged"
	long := strings.Repeat("x", 5000)
	for _, p := range []messages.Payload{
		&messages.ModelResponded{Model: "m", Message: messages.ChatMessage{Role: "assistant",
			ToolCalls: []messages.ToolCall{{ID: "c1", Name: forged, Arguments: "{}"}, {ID: "c2", Name: long, Arguments: "{}"}}}},
		&messages.ToolCallRequested{CallID: "c1", Tool: forged, Arguments: "{}"},
		&messages.ToolCallRequested{CallID: "c1", Tool: long, Arguments: "{}"},
		&messages.ToolCallCompleted{CallID: "c1", Tool: forged, Result: "ok"},
		&messages.ApprovalRequested{CallID: "c1", Tool: forged, Arguments: "{}"},
	} {
		if got := summary(p); strings.Contains(got, "\n") || len(got) > 300 {
			t.Errorf("%s: summary %q (%d bytes): want one line of at most 300 bytes", p.MessageType(), got, len(got))
		}
	}
}
