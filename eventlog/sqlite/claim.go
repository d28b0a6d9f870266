package sqlite

import (
	"context"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

var _ eventlog.Claiming = (*Log)(nil)

// Claim implements eventlog.Claiming: the writer looks for the session's events in
// the transaction that writes the batch, so of concurrent claims of one session
// (of this process or of others sharing the log) exactly one is written.
func (l *Log) Claim(ctx context.Context, events []messages.Envelope) error {
	return l.append(ctx, nil, events, true)
}

// ClaimLeased implements eventlog.Claiming: Claim, fenced in the same transaction
// as AppendLeased.
func (l *Log) ClaimLeased(ctx context.Context, lease eventlog.Lease, events []messages.Envelope) error {
	return l.append(ctx, &lease, events, true)
}
