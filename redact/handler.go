package redact

import (
	"context"
	"fmt"
	"log/slog"
)

// Handler is a slog.Handler that redacts every record before the handler it wraps
// sees it: the message, and the value of every attribute (the record's, those given
// to WithAttrs, inside groups). A string is redacted as it is; an error, or any
// other value, as the text it prints as (its Error, else %+v), and it is passed on
// as that redacted text only when the text held a secret, so that a record holding
// none reaches the next handler unchanged.
//
// A node's log lines carry text it does not write itself: what a stdio MCP server
// writes to its stderr, a server's or a provider's error (which may echo the request's
// URL or headers). Wrapping the node's handler keeps the secrets it knows out of them.
type Handler struct {
	next slog.Handler
	r    *Redactor
}

var _ slog.Handler = (*Handler)(nil)

// NewHandler returns a Handler that redacts with r (a nil r: credential shapes only)
// and passes the records on to next.
func NewHandler(next slog.Handler, r *Redactor) *Handler {
	return &Handler{next: next, r: r}
}

// Enabled reports whether the wrapped handler handles records at level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle redacts rec and passes it on.
func (h *Handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

// WithAttrs redacts attrs and returns a Handler over the wrapped handler's WithAttrs.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = h.attr(a)
	}
	return &Handler{next: h.next.WithAttrs(red), r: h.r}
}

// WithGroup returns a Handler over the wrapped handler's WithGroup.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), r: h.r}
}

// attr returns a with its value redacted.
func (h *Handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.r.String(v.String()))
	case slog.KindGroup:
		group := v.Group()
		red := make([]slog.Attr, len(group))
		for i, g := range group {
			red[i] = h.attr(g)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(red...)}
	case slog.KindAny:
		var text string
		switch x := v.Any().(type) {
		case error:
			text = x.Error()
		case []byte:
			text = string(x)
		default:
			text = fmt.Sprintf("%+v", x)
		}
		if red := h.r.String(text); red != text {
			return slog.String(a.Key, red)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
