package clickhouse

import (
	"context"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

var _ eventlog.Claiming = (*Log)(nil)

// Claim implements eventlog.Claiming. The writer looks up the session's events
// with the group's other stored events, and decides its claims one after the
// other, each seeing the events accepted before it: of concurrent claims of one
// session through one Log exactly one is written. Claims of one session by two
// processes at once are checked no more atomically than two Appends at one free
// seq (see the package doc).
func (l *Log) Claim(ctx context.Context, events []messages.Envelope) error {
	return l.append(ctx, nil, events, true)
}

// ClaimLeased implements eventlog.Claiming: Claim, fenced (checked before the
// insert and confirmed after it) as AppendLeased is.
func (l *Log) ClaimLeased(ctx context.Context, lease eventlog.Lease, events []messages.Envelope) error {
	return l.append(ctx, &lease, events, true)
}
