package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/troupe-run/troupe/eventlog"
)

var _ eventlog.Snapshots = (*Log)(nil)

// ErrSnapshotTooLarge is the error of SaveSnapshot for a state beyond
// Config.MaxSnapshotBytes: a permanent refusal, which leaves the session's
// snapshot as it was.
var ErrSnapshotTooLarge = errors.New("eventlog/clickhouse: fold snapshot too large")

// loadSnapshotQuery reads a session's latest saved snapshot (the greatest
// saved_us, of the rows of fold_snapshots not merged yet), reading the state of
// that row only: the condition on the key is a PREWHERE, and each row is a
// granule of its own.
const loadSnapshotQuery = `SELECT seq, event_id, event_sum, rules, codec, agents, state, sum FROM fold_snapshots
PREWHERE session_id = ? AND saved_us = (SELECT max(saved_us) FROM fold_snapshots WHERE session_id = ?)
ORDER BY seq DESC LIMIT 1`

// SaveSnapshot implements eventlog.Snapshots: one INSERT into fold_snapshots,
// of a row that reads take in place of the session's rows saved before (its
// saved_us is later than theirs, when the nodes' clocks agree: a row of a node
// whose clock is behind may lose to an older one until a later save; the
// session actor checks what it loads against the log). It is not fenced: a
// stale owner may save the state of its own history, which the next owner's
// session actor does not use (its event at the snapshot's seq is not the
// log's), and replaces at its next save. A state beyond Config.MaxSnapshotBytes
// is refused (ErrSnapshotTooLarge) before anything is sent.
func (l *Log) SaveSnapshot(ctx context.Context, s eventlog.FoldSnapshot) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("eventlog/clickhouse: save snapshot: %w", err)
	}
	if l.isClosed() {
		return fmt.Errorf("eventlog/clickhouse: save snapshot: %w", eventlog.ErrClosed)
	}
	if s.SessionID == "" || s.Seq == 0 || s.Seq > math.MaxInt64 || s.EventID == "" {
		return permanent(fmt.Errorf("eventlog/clickhouse: save snapshot: %w: session %q at seq %d of event %q", eventlog.ErrInvalidEvent, s.SessionID, s.Seq, s.EventID))
	}
	if len(s.State) > l.cfg.MaxSnapshotBytes {
		return permanent(fmt.Errorf("%w: session %s at seq %d: a state of %d bytes, beyond MaxSnapshotBytes (%d)",
			ErrSnapshotTooLarge, s.SessionID, s.Seq, len(s.State), l.cfg.MaxSnapshotBytes))
	}
	what := fmt.Sprintf("save the snapshot of %s at seq %d", s.SessionID, s.Seq)
	qctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
	defer cancel()
	b, err := l.conn.PrepareBatch(qctx, "INSERT INTO fold_snapshots (session_id, saved_us, seq, event_id, event_sum, rules, codec, agents, state, sum)")
	if err != nil {
		return l.readErr(ctx, what, err)
	}
	defer func() { _ = b.Close() }()
	if err := b.Append(s.SessionID, l.savedUS(), s.Seq, s.EventID, s.EventSum, int64(s.Rules), s.Codec, s.Agents, s.State, s.Sum); err != nil {
		return l.readErr(ctx, what, err)
	}
	if err := b.Send(); err != nil {
		return l.readErr(ctx, what, err)
	}
	return nil
}

// savedUS returns the saved_us of a snapshot saved now: the time in
// microseconds, later than any this Log returned before (two saves within a
// microsecond, or the clock stepping back, are still ordered).
func (l *Log) savedUS() uint64 {
	now := uint64(max(time.Now().UnixMicro(), 1))
	for {
		last := l.lastSaved.Load()
		next := max(now, last+1)
		if l.lastSaved.CompareAndSwap(last, next) {
			return next
		}
	}
}

// LoadSnapshot implements eventlog.Snapshots: the session's latest saved
// snapshot.
func (l *Log) LoadSnapshot(ctx context.Context, sessionID string) (eventlog.FoldSnapshot, bool, error) {
	if err := ctx.Err(); err != nil {
		return eventlog.FoldSnapshot{}, false, fmt.Errorf("eventlog/clickhouse: load snapshot: %w", err)
	}
	if l.isClosed() {
		return eventlog.FoldSnapshot{}, false, fmt.Errorf("eventlog/clickhouse: load snapshot: %w", eventlog.ErrClosed)
	}
	qctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
	defer cancel()
	what := "load the snapshot of " + sessionID
	rows, err := l.conn.Query(qctx, loadSnapshotQuery, sessionID, sessionID)
	if err != nil {
		return eventlog.FoldSnapshot{}, false, l.readErr(ctx, what, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return eventlog.FoldSnapshot{}, false, l.readErr(ctx, what, err)
		}
		return eventlog.FoldSnapshot{}, false, nil
	}
	s := eventlog.FoldSnapshot{SessionID: sessionID}
	var (
		rules int64
		state string
	)
	if err := rows.Scan(&s.Seq, &s.EventID, &s.EventSum, &rules, &s.Codec, &s.Agents, &state, &s.Sum); err != nil {
		return eventlog.FoldSnapshot{}, false, l.readErr(ctx, what, err)
	}
	if err := rows.Err(); err != nil {
		return eventlog.FoldSnapshot{}, false, l.readErr(ctx, what, err)
	}
	if s.Seq == 0 || s.Seq > math.MaxInt64 || rules < math.MinInt32 || rules > math.MaxInt32 {
		return eventlog.FoldSnapshot{}, false, nil
	}
	s.Rules, s.State = int(rules), []byte(state)
	return s, true, nil
}
