package node

import (
	"context"
	"fmt"
	"log/slog"
)

// deadLetters wraps the actor system's log handler. protoactor logs every message sent
// to a stopped actor at INFO with the message itself. In a cluster that is routine (a
// tool result for a session that moved to another node) and the message may carry a
// model's answer before redaction, so the record is demoted to DEBUG and carries only
// the message's type.
type deadLetters struct{ slog.Handler }

func (h deadLetters) Handle(ctx context.Context, r slog.Record) error {
	if r.Message != "[DeadLetter]" {
		return h.Handler.Handle(ctx, r)
	}
	if !h.Handler.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	nr := slog.NewRecord(r.Time, slog.LevelDebug, "message to a stopped actor dropped", r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "message" {
			a = slog.String("message_type", fmt.Sprintf("%T", a.Value.Any()))
		}
		nr.AddAttrs(a)
		return true
	})
	return h.Handler.Handle(ctx, nr)
}

func (h deadLetters) WithAttrs(attrs []slog.Attr) slog.Handler {
	return deadLetters{h.Handler.WithAttrs(attrs)}
}

func (h deadLetters) WithGroup(name string) slog.Handler {
	return deadLetters{h.Handler.WithGroup(name)}
}
