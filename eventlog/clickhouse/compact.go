package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/troupe-run/troupe/eventlog"
)

var (
	_ eventlog.Compacting     = (*Log)(nil)
	_ eventlog.CompactingCost = (*Log)(nil)
)

// CompactMin implements eventlog.CompactingCost: Config.CompactMin.
func (l *Log) CompactMin() int { return l.cfg.CompactMin }

// storedSeqsQuery lists the seqs a stream holds (of every epoch), ascending.
const storedSeqsQuery = `SELECT DISTINCT seq FROM events WHERE session_id = ? ORDER BY seq`

// summaryQuery is sessions_mv's SELECT (schema/0004_sessions.sql) for one
// stream: the summary of its events as they are now.
const summaryQuery = `INSERT INTO sessions
SELECT
    session_id,
    uniqExactState(seq) AS events,
    uniqExactIfState(seq, type = 'model.requested') AS steps,
    maxState(seq) AS last_seq,
    argMaxIfState(type, seq, type IN ('task.submitted', 'task.completed', 'task.failed')) AS status_type,
    minState(ts) AS started_us,
    maxState(ts) AS updated_us
FROM events
WHERE session_id = ?
GROUP BY session_id`

// DeleteEvents implements eventlog.Compacting with mutations (ALTER TABLE …
// DELETE), as PruneStreams does, of the tables that hold rows of a knowledge
// base's events: events, and event_ids (the IDs the knowledge bases give are not
// canonical). The other tables the materialized views fill hold none: a
// stream of eventlog.NonSessionPrefixes is left out of session_summaries and
// open_tasks, holds no task.* event for session_tasks, and is appended without
// a lease, so fenced_events lists none of it. The stream's summary in table
// sessions, whose aggregate states cannot lose an event, is deleted and
// written anew from the events left (summaryQuery): the new row's part is
// written after the mutation was created, so the mutation leaves it alone;
// a listing between the two misses the stream for that moment.
//
// A mutation rewrites each data part that holds rows it deletes (ClickHouse
// hard-links the others), one part after the other: a Read while it runs may
// return any subset of the events listed (see eventlog.Compacting). It returns
// once the mutations are done (system.mutations); if ctx ends first, they go on
// in the server, and the summary stays as it was (it counts the deleted events
// until the stream's next compaction).
func (l *Log) DeleteEvents(ctx context.Context, stream string, seqs []uint64) (int, error) {
	if err := eventlog.CheckCompactable(stream, seqs); err != nil {
		return 0, fmt.Errorf("eventlog/clickhouse: delete events: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("eventlog/clickhouse: delete %d events of %s: %w", len(seqs), stream, err)
	}
	if l.isClosed() {
		return 0, fmt.Errorf("eventlog/clickhouse: delete %d events of %s: %w", len(seqs), stream, eventlog.ErrClosed)
	}
	if len(seqs) == 0 {
		return 0, nil
	}
	stored, err := l.storedSeqs(ctx, stream)
	if err != nil {
		return 0, err
	}
	if len(stored) == 0 {
		return 0, nil
	}
	last := stored[len(stored)-1]
	var due []string
	for _, seq := range slices.Compact(slices.Sorted(slices.Values(seqs))) {
		if _, found := slices.BinarySearch(stored, seq); found && seq < last {
			due = append(due, strconv.FormatUint(seq, 10))
		}
	}
	if len(due) == 0 {
		return 0, nil
	}
	fail := func(what string, err error) (int, error) {
		return 0, fmt.Errorf("eventlog/clickhouse: delete %d events of %s: %s: %w", len(due), stream, what, err)
	}
	where := " DELETE WHERE session_id = ? AND seq IN (" + strings.Join(due, ", ") + ")"
	for _, table := range []string{"event_ids", "events"} { // events last, as in pruneTables
		if err := l.exec(ctx, "ALTER TABLE "+table+where, stream); err != nil {
			return fail("delete from "+table, err)
		}
	}
	if err := l.waitMutations(ctx, []string{"'event_ids'", "'events'"}); err != nil {
		return fail("delete", err)
	}
	if err := l.exec(ctx, "ALTER TABLE sessions DELETE WHERE session_id = ?", stream); err != nil {
		return fail("delete its summary", err)
	}
	if err := l.exec(ctx, summaryQuery, stream); err != nil {
		return fail("write its summary anew", err)
	}
	if err := l.waitMutations(ctx, []string{"'sessions'"}); err != nil {
		return fail("delete its summary", err)
	}
	return len(due), nil
}

// storedSeqs returns the seqs stream holds, ascending.
func (l *Log) storedSeqs(ctx context.Context, stream string) ([]uint64, error) {
	qctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
	defer cancel()
	rows, err := l.conn.Query(qctx, storedSeqsQuery, stream)
	if err != nil {
		return nil, l.readErr(ctx, "delete events of "+stream+": read its seqs", err)
	}
	defer rows.Close()
	var out []uint64
	for rows.Next() {
		var seq uint64
		if err := rows.Scan(&seq); err != nil {
			return nil, fmt.Errorf("eventlog/clickhouse: delete events of %s: read its seqs: %w", stream, err)
		}
		out = append(out, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("eventlog/clickhouse: delete events of %s: read its seqs: %w", stream, err)
	}
	return out, nil
}

// exec runs one statement within the query timeout.
func (l *Log) exec(ctx context.Context, query string, args ...any) error {
	qctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
	defer cancel()
	return l.conn.Exec(qctx, query, args...)
}
