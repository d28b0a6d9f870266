package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/troupe-run/troupe/eventlog"
)

var _ eventlog.Snapshots = (*Log)(nil)

// SaveSnapshot implements eventlog.Snapshots: one statement in a transaction of
// the writer.
func (l *Log) SaveSnapshot(ctx context.Context, s eventlog.FoldSnapshot) error {
	if err := l.writable(ctx, "save snapshot", "save a snapshot in"); err != nil {
		return err
	}
	if s.SessionID == "" || s.Seq == 0 || s.Seq > math.MaxInt64 || s.EventID == "" {
		return fmt.Errorf("eventlog/sqlite: save snapshot: %w: session %q at seq %d of event %q", eventlog.ErrInvalidEvent, s.SessionID, s.Seq, s.EventID)
	}
	return l.submit(ctx, &appendReq{ctx: ctx, snap: &s, done: make(chan error, 1)})
}

// saveSnapshot writes s inside the writer's transaction.
func (l *Log) saveSnapshot(ctx context.Context, s *eventlog.FoldSnapshot) error {
	if _, err := l.w.exec(ctx, l.w.saveSnapshot, s.SessionID, int64(s.Seq), s.EventID, s.EventSum, int64(s.Rules), s.Codec, s.Agents, s.State, s.Sum); err != nil {
		return fmt.Errorf("eventlog/sqlite: save the snapshot of %s at seq %d: %w", s.SessionID, s.Seq, err)
	}
	return nil
}

// LoadSnapshot implements eventlog.Snapshots.
func (l *Log) LoadSnapshot(ctx context.Context, sessionID string) (eventlog.FoldSnapshot, bool, error) {
	s := eventlog.FoldSnapshot{SessionID: sessionID}
	var seq, rules int64
	err := l.rdb.QueryRowContext(ctx, `SELECT seq, event_id, event_sum, rules, codec, agents, state, sum FROM fold_snapshots WHERE session_id = ?`, sessionID).
		Scan(&seq, &s.EventID, &s.EventSum, &rules, &s.Codec, &s.Agents, &s.State, &s.Sum)
	if errors.Is(err, sql.ErrNoRows) {
		return eventlog.FoldSnapshot{}, false, nil
	}
	if err != nil {
		return eventlog.FoldSnapshot{}, false, l.readErr("load snapshot", err)
	}
	if seq <= 0 {
		return eventlog.FoldSnapshot{}, false, nil
	}
	s.Seq, s.Rules = uint64(seq), int(rules)
	return s, true, nil
}
