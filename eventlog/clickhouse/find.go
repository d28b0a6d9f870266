package clickhouse

import (
	"context"
	"fmt"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

var _ eventlog.EventFinding = (*Log)(nil)

// findQuery finds the seqs at which a session holds an event whose ID is not
// its position's canonical ID, by table event_ids (ordered by ID), which
// event_ids_mv fills with those IDs only.
const findQuery = `SELECT DISTINCT seq FROM event_ids WHERE id = ? AND session_id = ? ORDER BY seq`

// FindEvent implements eventlog.EventFinding: an event whose ID is not
// canonical is found by its ID (event_ids), one whose ID is canonical at the
// position it names; either is then read as Read reads it (ReadN of one event
// from its seq), so that an event Read hides (a stale owner's), or another
// event at that seq, is not found.
func (l *Log) FindEvent(ctx context.Context, sessionID, id string) (messages.Envelope, bool, error) {
	if err := ctx.Err(); err != nil {
		return messages.Envelope{}, false, fmt.Errorf("eventlog/clickhouse: find event %s of session %s: %w", id, sessionID, err)
	}
	if l.isClosed() {
		return messages.Envelope{}, false, fmt.Errorf("eventlog/clickhouse: find event %s of session %s: %w", id, sessionID, eventlog.ErrClosed)
	}
	var seqs []uint64
	if p, ok := canonicalPosition(id); ok {
		if p.session == sessionID {
			seqs = append(seqs, p.seq)
		}
	} else {
		qctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
		defer cancel()
		rows, err := l.conn.Query(qctx, findQuery, id, sessionID)
		if err != nil {
			return messages.Envelope{}, false, l.readErr(ctx, fmt.Sprintf("find event %s of session %s", id, sessionID), err)
		}
		for rows.Next() {
			var seq uint64
			if err := rows.Scan(&seq); err != nil {
				rows.Close()
				return messages.Envelope{}, false, l.readErr(ctx, fmt.Sprintf("find event %s of session %s", id, sessionID), err)
			}
			seqs = append(seqs, seq)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return messages.Envelope{}, false, l.readErr(ctx, fmt.Sprintf("find event %s of session %s", id, sessionID), err)
		}
	}
	for _, seq := range seqs {
		page, err := l.ReadN(ctx, sessionID, seq, 1, 0)
		if err != nil {
			return messages.Envelope{}, false, err
		}
		if len(page) == 1 && page[0].ID == id && page[0].Seq == seq {
			return page[0], true, nil
		}
	}
	return messages.Envelope{}, false, nil
}
