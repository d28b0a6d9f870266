package sqlite

import (
	"context"
	"database/sql/driver"
	"fmt"

	"github.com/troupe-run/troupe/eventlog"
)

var _ eventlog.Pruner = (*Log)(nil)

// pruneReq is a PruneBusStreams call: the writer sets pruned before it answers.
type pruneReq struct {
	beforeUS int64
	limit    int64
	pruned   int64
}

// dueBusStreams selects the bus streams (eventlog.BusStreamPrefix, a range of the
// sessions table's key: '0' follows '/') whose last event is stamped before the
// first parameter, at most the second parameter of them, in key order, so that
// the statements of one transaction pick the same ones.
const dueBusStreams = `SELECT session_id FROM sessions WHERE session_id >= '` + eventlog.BusStreamPrefix + `'
	AND session_id < '` + busPrefixEnd + `' AND updated_us < ? ORDER BY session_id LIMIT ?`

// busPrefixEnd is the least string above every one that starts with
// eventlog.BusStreamPrefix ("bus/": "bus0").
const busPrefixEnd = "bus0"

// PruneBusStreams implements eventlog.Pruner. The deletion is one transaction of
// the writer: its events, their IDs kept in table aliases, and its summary row go
// together.
func (l *Log) PruneBusStreams(ctx context.Context, beforeUS int64, limit int) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("eventlog/sqlite: prune bus streams: limit %d, want > 0", limit)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("eventlog/sqlite: prune bus streams: %w", err)
	}
	if l.isClosed() {
		return 0, fmt.Errorf("eventlog/sqlite: prune bus streams: %w", eventlog.ErrClosed)
	}
	if l.cfg.ReadOnly {
		return 0, fmt.Errorf("eventlog/sqlite: prune bus streams of %s: %w", l.path, ErrReadOnly)
	}
	p := &pruneReq{beforeUS: beforeUS, limit: int64(limit)}
	if err := l.submit(ctx, &appendReq{ctx: ctx, prune: p, done: make(chan error, 1)}); err != nil {
		return 0, err
	}
	return int(p.pruned), nil
}

// pruneBusStreams deletes the bus streams p names, inside the writer's transaction.
func (l *Log) pruneBusStreams(ctx context.Context, p *pruneReq) error {
	for _, s := range []struct {
		what string
		stmt *driver.Stmt
	}{{"their IDs", &l.w.pruneAliases}, {"their events", &l.w.pruneEvents}} {
		if _, err := l.w.exec(ctx, *s.stmt, p.beforeUS, p.limit); err != nil {
			return fmt.Errorf("eventlog/sqlite: prune bus streams: delete %s: %w", s.what, err)
		}
	}
	n, err := l.w.exec(ctx, l.w.pruneSessions, p.beforeUS, p.limit)
	if err != nil {
		return fmt.Errorf("eventlog/sqlite: prune bus streams: delete their summaries: %w", err)
	}
	p.pruned = n
	return nil
}
