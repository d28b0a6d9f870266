package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

var _ eventlog.EventFinding = (*Log)(nil)

// findQuery finds the seq of a session's event whose ID is not derived from its
// position, by index events_by_id (which holds those IDs only: the condition
// repeats its own, so that SQLite may use it).
const findQuery = `SELECT seq FROM events WHERE id = ? AND NOT (` + derivedWhere + `) AND session_id = ?`

// FindEvent implements eventlog.EventFinding: the event whose ID is not derived
// from its position is found by its ID (index events_by_id), one whose ID is
// derived at the position it derives from; either is then read as Read reads
// it (ReadN of the one event from its seq), so that an event Read hides, or
// another event at that seq, is not found.
func (l *Log) FindEvent(ctx context.Context, sessionID, id string) (messages.Envelope, bool, error) {
	if l.isClosed() {
		return messages.Envelope{}, false, fmt.Errorf("eventlog/sqlite: find event %s of session %s: %w", id, sessionID, eventlog.ErrClosed)
	}
	var seq int64
	err := l.rdb.QueryRowContext(ctx, findQuery, id, sessionID).Scan(&seq)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		s, q, ok := positionOf(id)
		if !ok || s != sessionID {
			return messages.Envelope{}, false, nil
		}
		seq = int64(q)
	case err != nil:
		return messages.Envelope{}, false, l.readErr(fmt.Sprintf("find event %s of session %s", id, sessionID), err)
	}
	page, err := l.ReadN(ctx, sessionID, uint64(seq), 1, 0)
	if err != nil || len(page) == 0 || page[0].ID != id || page[0].Seq != uint64(seq) {
		return messages.Envelope{}, false, err
	}
	return page[0], true, nil
}
