package sqlite

import (
	"context"
	"fmt"
	"slices"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

var _ eventlog.Compacting = (*Log)(nil)

// compactReq is a DeleteEvents call: the writer sets deleted before it answers.
type compactReq struct {
	stream  string
	seqs    []uint64
	deleted int64
}

// DeleteEvents implements eventlog.Compacting. The deletion is one transaction of
// the writer: the events, their IDs kept in table aliases, and the count of the
// stream's summary row go together.
func (l *Log) DeleteEvents(ctx context.Context, stream string, seqs []uint64) (int, error) {
	if err := eventlog.CheckCompactable(stream, seqs); err != nil {
		return 0, fmt.Errorf("eventlog/sqlite: delete events: %w", err)
	}
	what := fmt.Sprintf("delete %d events of %s", len(seqs), stream)
	if err := l.writable(ctx, what, what+" in"); err != nil {
		return 0, err
	}
	if len(seqs) == 0 {
		return 0, nil
	}
	c := &compactReq{stream: stream, seqs: slices.Compact(slices.Sorted(slices.Values(seqs)))}
	if err := l.submit(ctx, &appendReq{ctx: ctx, compact: c, done: make(chan error, 1)}); err != nil {
		return 0, err
	}
	return int(c.deleted), nil
}

// deleteEvents deletes the events c names, but the stream's last, inside the
// writer's transaction, and takes them off the stream's summary.
func (l *Log) deleteEvents(ctx context.Context, c *compactReq) error {
	c.deleted = 0
	row, err := l.w.queryRow(ctx, l.w.lastSeq, c.stream)
	var last int64
	if err == nil {
		last, err = asInt64(row[0])
	}
	if err != nil {
		return fmt.Errorf("eventlog/sqlite: delete events of %s: read its last seq: %w", c.stream, err)
	}
	for _, seq := range c.seqs {
		if int64(seq) >= last {
			break
		}
		if _, err := l.w.exec(ctx, l.w.compactAlias, c.stream, int64(seq)); err != nil {
			return fmt.Errorf("eventlog/sqlite: delete event %d of %s: its alias: %w", seq, c.stream, err)
		}
		n, err := l.w.exec(ctx, l.w.compactEvent, c.stream, int64(seq))
		if err != nil {
			return fmt.Errorf("eventlog/sqlite: delete event %d of %s: %w", seq, c.stream, err)
		}
		c.deleted += n
	}
	if c.deleted == 0 {
		return nil
	}
	if _, err := l.w.exec(ctx, l.w.compactSummary, c.deleted, c.stream); err != nil {
		return fmt.Errorf("eventlog/sqlite: delete events of %s: update its summary: %w", c.stream, err)
	}
	return nil
}

// checkHole refuses e, an event of a compactable stream, when its seq is free
// but below the stream's highest: a hole DeleteEvents left, which only a writer
// that folded the stream before the deletion would try to fill
// (eventlog.Compacting). An event at a taken position is left to the insert
// (a repeat, or a conflict).
func (l *Log) checkHole(ctx context.Context, e messages.Envelope) error {
	if err := l.flushRows(ctx); err != nil { // the lookup must see them
		return err
	}
	row, err := l.w.queryRow(ctx, l.w.holeAt, e.SessionID, int64(e.Seq))
	var taken, above int64
	if err == nil {
		err = scan(row, &taken, &above)
	}
	if err != nil {
		return fmt.Errorf("eventlog/sqlite: append event %s (session %s seq %d): look up its position: %w", e.ID, e.SessionID, e.Seq, err)
	}
	if taken == 0 && above != 0 {
		return fmt.Errorf("%w: session %s holds events after seq %d, appended %s (its events were compacted: fold the stream again)",
			eventlog.ErrSeqConflict, e.SessionID, e.Seq, e.ID)
	}
	return nil
}
