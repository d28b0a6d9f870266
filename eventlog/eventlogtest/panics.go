package eventlogtest

import (
	"context"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// PanicsOnToolResult is a log, for the tests of what writes to one, whose Append
// panics with Value on every batch that records a tool's result
// (tool_call.completed) in the session Session, and passes every other call to
// Log. It offers Log's methods of eventlog.Log alone, none of its optional ones.
type PanicsOnToolResult struct {
	eventlog.Log
	Session string
	Value   any
}

func (l *PanicsOnToolResult) Append(ctx context.Context, events []messages.Envelope) error {
	for _, e := range events {
		if e.SessionID == l.Session && e.Type == messages.TypeToolCallCompleted {
			panic(l.Value)
		}
	}
	return l.Log.Append(ctx, events)
}
