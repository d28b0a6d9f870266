package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/troupe-run/troupe/eventlog"
)

var _ eventlog.Pruner = (*Log)(nil)

// pruneTables are the tables that hold rows of a stream, by the column that names
// it: the events, and what the materialized views derive from them (event_ids:
// the events whose ID is their own, such as a bus stream's one event).
var pruneTables = []struct{ table, column string }{
	{"event_ids", "session_id"},
	{"sessions", "session_id"},
	{"session_tasks", "session_id"},
	{"session_summaries", "session_id"},
	{"open_tasks", "session_id"},
	{"events", "session_id"}, // last: a prune cut short is found again by its events
}

// dueStreamsQuery lists the streams of a range of the events table's key (the
// first two parameters) whose last event is stamped before the third parameter,
// at most the fourth parameter of them.
const dueStreamsQuery = `SELECT session_id FROM events
PREWHERE session_id >= ? AND session_id < ?
GROUP BY session_id HAVING max(ts) < ? ORDER BY session_id LIMIT ?`

// PruneBusStreams implements eventlog.Pruner.
func (l *Log) PruneBusStreams(ctx context.Context, beforeUS int64, limit int) (int, error) {
	return l.PruneStreams(ctx, eventlog.BusStreamPrefix, beforeUS, limit)
}

// PruneStreams implements eventlog.Pruner. ClickHouse deletes rows with a
// mutation (ALTER TABLE … DELETE), which rewrites the data parts that hold them in
// the background: PruneStreams starts one per table and returns once they are
// done (system.mutations), so that a caller that prunes again does not find the
// same streams. Rewriting parts costs what the parts weigh: prune seldom, many
// streams at a time. If ctx ends first, the mutations go on in the server.
func (l *Log) PruneStreams(ctx context.Context, prefix string, beforeUS int64, limit int) (int, error) {
	if err := eventlog.CheckPrunable(prefix); err != nil {
		return 0, fmt.Errorf("eventlog/clickhouse: prune streams: %w", err)
	}
	if limit <= 0 {
		return 0, fmt.Errorf("eventlog/clickhouse: prune streams of %s: limit %d, want > 0", prefix, limit)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("eventlog/clickhouse: prune streams of %s: %w", prefix, err)
	}
	if l.isClosed() {
		return 0, fmt.Errorf("eventlog/clickhouse: prune streams of %s: %w", prefix, eventlog.ErrClosed)
	}
	from, end := eventlog.PrefixRange(prefix)
	qctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
	rows, err := l.conn.Query(qctx, dueStreamsQuery, from, end, beforeUS, uint64(limit))
	if err != nil {
		cancel()
		return 0, l.readErr(ctx, "prune streams of "+prefix+": list them", err)
	}
	var due []any
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			cancel()
			return 0, fmt.Errorf("eventlog/clickhouse: prune streams of %s: list them: %w", prefix, err)
		}
		due = append(due, id)
	}
	rows.Close()
	err = rows.Err()
	cancel()
	if err != nil {
		return 0, fmt.Errorf("eventlog/clickhouse: prune streams of %s: list them: %w", prefix, err)
	}
	if len(due) == 0 {
		return 0, nil
	}
	if err := l.deleteStreams(ctx, due); err != nil {
		return 0, fmt.Errorf("eventlog/clickhouse: prune %d streams of %s: %w", len(due), prefix, err)
	}
	return len(due), nil
}

// PruneListed implements eventlog.Pruner: one query finds which of the streams
// are due (the last event of each, against its bound), and one mutation per
// table deletes them all, as PruneStreams's do.
func (l *Log) PruneListed(ctx context.Context, streams []eventlog.StreamBound) (int, error) {
	if err := eventlog.CheckPruneList(streams); err != nil {
		return 0, fmt.Errorf("eventlog/clickhouse: prune listed streams: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("eventlog/clickhouse: prune %d listed streams: %w", len(streams), err)
	}
	if l.isClosed() {
		return 0, fmt.Errorf("eventlog/clickhouse: prune %d listed streams: %w", len(streams), eventlog.ErrClosed)
	}
	if len(streams) == 0 {
		return 0, nil
	}
	bound := make(map[string]int64, len(streams))
	ids := make([]any, len(streams))
	for i, s := range streams {
		bound[s.ID] = s.BeforeUS
		ids[i] = s.ID
	}
	in := strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")
	qctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
	rows, err := l.conn.Query(qctx, "SELECT session_id, max(ts) FROM events PREWHERE session_id IN ("+in+") GROUP BY session_id", ids...)
	if err != nil {
		cancel()
		return 0, l.readErr(ctx, fmt.Sprintf("prune %d listed streams: find those due", len(streams)), err)
	}
	var due []any
	for rows.Next() {
		var (
			id   string
			last int64
		)
		if err := rows.Scan(&id, &last); err != nil {
			rows.Close()
			cancel()
			return 0, fmt.Errorf("eventlog/clickhouse: prune %d listed streams: find those due: %w", len(streams), err)
		}
		if before, ok := bound[id]; ok && last < before {
			due = append(due, id)
		}
	}
	rows.Close()
	err = rows.Err()
	cancel()
	if err != nil {
		return 0, fmt.Errorf("eventlog/clickhouse: prune %d listed streams: find those due: %w", len(streams), err)
	}
	if len(due) == 0 {
		return 0, nil
	}
	if err := l.deleteStreams(ctx, due); err != nil {
		return 0, fmt.Errorf("eventlog/clickhouse: prune %d of %d listed streams: %w", len(due), len(streams), err)
	}
	return len(due), nil
}

// deleteStreams deletes the streams due (their IDs) from each table of
// pruneTables, one mutation per table, and waits until the mutations are done.
func (l *Log) deleteStreams(ctx context.Context, due []any) error {
	in := strings.TrimSuffix(strings.Repeat("?, ", len(due)), ", ")
	var tables []string
	for _, t := range pruneTables {
		if err := l.exec(ctx, "ALTER TABLE "+t.table+" DELETE WHERE "+t.column+" IN ("+in+")", due...); err != nil {
			return fmt.Errorf("delete from %s: %w", t.table, err)
		}
		tables = append(tables, "'"+t.table+"'")
	}
	return l.waitMutations(ctx, tables)
}

// waitMutations waits until no mutation of tables (quoted names) is left to do.
func (l *Log) waitMutations(ctx context.Context, tables []string) error {
	q := "SELECT count() FROM system.mutations WHERE database = currentDatabase() AND is_done = 0 AND table IN (" + strings.Join(tables, ", ") + ")"
	pause := 20 * time.Millisecond
	for {
		qctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
		var left uint64
		err := l.conn.QueryRow(qctx, q).Scan(&left)
		cancel()
		if err != nil {
			return fmt.Errorf("wait for the deletions: %w", err)
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the deletions go on in the server: %w", ctx.Err())
		case <-l.closing:
			return fmt.Errorf("the deletions go on in the server: %w", eventlog.ErrClosed)
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}
