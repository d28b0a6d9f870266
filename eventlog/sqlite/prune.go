package sqlite

import (
	"context"
	"database/sql/driver"
	"fmt"
	"slices"

	"github.com/troupe-run/troupe/eventlog"
)

var _ eventlog.Pruner = (*Log)(nil)

// pruneReq is a PruneStreams or PruneListed call: the writer sets pruned before
// it answers.
type pruneReq struct {
	from, end string // the range of the streams' IDs (eventlog.PrefixRange)
	beforeUS  int64
	limit     int64
	listed    []eventlog.StreamBound // PruneListed's; from, end and the rest unset
	pruned    int64
}

// listedDue selects the stream named by the first parameter if its last event is
// stamped before the second.
const listedDue = `SELECT session_id FROM sessions WHERE session_id = ? AND updated_us < ?`

// dueStreams selects the streams of a range of the sessions table's key (the
// first two parameters) whose last event is stamped before the third parameter,
// at most the fourth parameter of them, in key order, so that the statements of
// one transaction pick the same ones.
const dueStreams = `SELECT session_id FROM sessions WHERE session_id >= ? AND session_id < ?
	AND updated_us < ? ORDER BY session_id LIMIT ?`

// PruneBusStreams implements eventlog.Pruner.
func (l *Log) PruneBusStreams(ctx context.Context, beforeUS int64, limit int) (int, error) {
	return l.PruneStreams(ctx, eventlog.BusStreamPrefix, beforeUS, limit)
}

// PruneStreams implements eventlog.Pruner. The deletion is one transaction of
// the writer: its events, their IDs kept in table aliases, and its summary row go
// together.
func (l *Log) PruneStreams(ctx context.Context, prefix string, beforeUS int64, limit int) (int, error) {
	if err := eventlog.CheckPrunable(prefix); err != nil {
		return 0, fmt.Errorf("eventlog/sqlite: prune streams: %w", err)
	}
	if limit <= 0 {
		return 0, fmt.Errorf("eventlog/sqlite: prune streams of %s: limit %d, want > 0", prefix, limit)
	}
	if err := l.writable(ctx, "prune streams of "+prefix, "prune streams of "+prefix+" in"); err != nil {
		return 0, err
	}
	from, end := eventlog.PrefixRange(prefix)
	p := &pruneReq{from: from, end: end, beforeUS: beforeUS, limit: int64(limit)}
	if err := l.submit(ctx, &appendReq{ctx: ctx, prune: p, done: make(chan error, 1)}); err != nil {
		return 0, err
	}
	return int(p.pruned), nil
}

// PruneListed implements eventlog.Pruner. The deletion is one transaction of
// the writer, as PruneStreams's is.
func (l *Log) PruneListed(ctx context.Context, streams []eventlog.StreamBound) (int, error) {
	if err := eventlog.CheckPruneList(streams); err != nil {
		return 0, fmt.Errorf("eventlog/sqlite: prune listed streams: %w", err)
	}
	what := fmt.Sprintf("prune %d listed streams", len(streams))
	if err := l.writable(ctx, what, what+" in"); err != nil {
		return 0, err
	}
	if len(streams) == 0 {
		return 0, nil
	}
	p := &pruneReq{listed: slices.Clone(streams)} // the writer may read it after a caller whose ctx ended returned
	if err := l.submit(ctx, &appendReq{ctx: ctx, prune: p, done: make(chan error, 1)}); err != nil {
		return 0, err
	}
	return int(p.pruned), nil
}

// pruneStreams deletes the streams p names, inside the writer's transaction.
func (l *Log) pruneStreams(ctx context.Context, p *pruneReq) error {
	if p.listed != nil {
		return l.pruneListed(ctx, p)
	}
	for _, s := range []struct {
		what string
		stmt *driver.Stmt
	}{{"their IDs", &l.w.pruneAliases}, {"their events", &l.w.pruneEvents}} {
		if _, err := l.w.exec(ctx, *s.stmt, p.from, p.end, p.beforeUS, p.limit); err != nil {
			return fmt.Errorf("eventlog/sqlite: prune streams of %s: delete %s: %w", p.from, s.what, err)
		}
	}
	n, err := l.w.exec(ctx, l.w.pruneSessions, p.from, p.end, p.beforeUS, p.limit)
	if err != nil {
		return fmt.Errorf("eventlog/sqlite: prune streams of %s: delete their summaries: %w", p.from, err)
	}
	p.pruned = n
	return nil
}

// pruneListed deletes the streams p lists that are due, inside the writer's
// transaction: each stream's IDs, events and summary, the summary last, since
// the other statements find it due by it.
func (l *Log) pruneListed(ctx context.Context, p *pruneReq) error {
	p.pruned = 0
	for _, s := range p.listed {
		for _, d := range []struct {
			what string
			stmt *driver.Stmt
		}{{"IDs", &l.w.pruneListedAliases}, {"events", &l.w.pruneListedEvents}} {
			if _, err := l.w.exec(ctx, *d.stmt, s.ID, s.BeforeUS); err != nil {
				return fmt.Errorf("eventlog/sqlite: prune %d listed streams: delete the %s of %s: %w", len(p.listed), d.what, s.ID, err)
			}
		}
		n, err := l.w.exec(ctx, l.w.pruneListedSessions, s.ID, s.BeforeUS)
		if err != nil {
			return fmt.Errorf("eventlog/sqlite: prune %d listed streams: delete the summary of %s: %w", len(p.listed), s.ID, err)
		}
		p.pruned += n
	}
	return nil
}
