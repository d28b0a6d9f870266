package clickhouse

import (
	"context"
	"fmt"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

var _ eventlog.EventFinding = (*Log)(nil)

// findQuery finds the seqs at which a session holds an event whose ID is not
// its position's canonical ID (though it may be another position's), by table
// event_ids (ordered by ID), which event_ids_mv fills with those IDs only.
const findQuery = `SELECT DISTINCT seq FROM event_ids WHERE id = ? AND session_id = ? ORDER BY seq`

// FindEvent implements eventlog.EventFinding: an event whose ID is canonical
// is looked for at the position it names; one whose ID is not canonical at its
// position (any other ID, or the canonical ID of another position: of a seq
// past the session's, or of another session) by its ID in event_ids; either is
// then read as Read reads it (ReadN of one event from its seq), so that an event
// Read hides (a stale owner's), or another event at that seq, is not found.
func (l *Log) FindEvent(ctx context.Context, sessionID, id string) (messages.Envelope, bool, error) {
	if err := ctx.Err(); err != nil {
		return messages.Envelope{}, false, fmt.Errorf("eventlog/clickhouse: find event %s of session %s: %w", id, sessionID, err)
	}
	if l.isClosed() {
		return messages.Envelope{}, false, fmt.Errorf("eventlog/clickhouse: find event %s of session %s: %w", id, sessionID, eventlog.ErrClosed)
	}
	at := func(seqs []uint64) (messages.Envelope, bool, error) {
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
	if p, ok := canonicalPosition(id); ok && p.session == sessionID {
		if e, found, err := at([]uint64{p.seq}); err != nil || found {
			return e, found, err
		}
	}
	seqs, err := l.findSeqs(ctx, sessionID, id)
	if err != nil {
		return messages.Envelope{}, false, err
	}
	return at(seqs)
}

// findSeqs returns the seqs at which event_ids lists id in session sessionID.
func (l *Log) findSeqs(ctx context.Context, sessionID, id string) ([]uint64, error) {
	qctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
	defer cancel()
	rows, err := l.conn.Query(qctx, findQuery, id, sessionID)
	if err != nil {
		return nil, l.readErr(ctx, fmt.Sprintf("find event %s of session %s", id, sessionID), err)
	}
	defer rows.Close()
	var seqs []uint64
	for rows.Next() {
		var seq uint64
		if err := rows.Scan(&seq); err != nil {
			return nil, l.readErr(ctx, fmt.Sprintf("find event %s of session %s", id, sessionID), err)
		}
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, l.readErr(ctx, fmt.Sprintf("find event %s of session %s", id, sessionID), err)
	}
	return seqs, nil
}
