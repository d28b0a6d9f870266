package clickhouse

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

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
PREWHERE session_id = ?
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
// a listing between the two misses the stream for that moment (see below). The
// two go together, whenever ctx ends and even while Close runs
// (rewriteSummary): apart, the stream would have no summary, and the listings
// (knowledge.Bases.List) would miss it until it had one.
//
// A mutation rewrites each data part that holds rows it deletes (ClickHouse
// hard-links the others), one part after the other: a Read while it runs may
// return any subset of the events listed (see eventlog.Compacting). It returns
// once the mutations are done (system.mutations); if ctx ends first, they go on
// in the server, and the log writes the summary anew in the background once
// they are done (settleLater: one worker for the streams so left, each settled
// once however often it was left, which gives up after defaultSettleWait). A
// process killed before it wrote the summary, or a worker that gave up, leaves
// it stale: Open repairs the summaries of the compacted streams
// (repairSummaries), unless Config.NoSummaryRepair.
//
// The summary's deletion cannot follow the new row's insertion instead (which
// would close the moment a listing misses the stream): sessions is an
// AggregatingMergeTree keyed by session_id alone, whose merges may fold the new
// row and the stale ones into one row at any time before the deletion's
// mutation is created, and no condition then tells them apart. Created first,
// the mutation keeps them apart: it covers the parts written before it only,
// and ClickHouse merges no part it has yet to mutate with one written after it.
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
	// Once a mutation was asked for, it may run in the server whatever this
	// call sees: a failure leaves the summary to settleLater.
	unsettled := func(what string, err error) (int, error) {
		l.settleLater(stream)
		return fail(what, err)
	}
	where := " DELETE WHERE session_id = ? AND seq IN (" + strings.Join(due, ", ") + ")"
	for _, table := range []string{"event_ids", "events"} { // events last, as in pruneTables
		if err := l.exec(ctx, "ALTER TABLE "+table+where, stream); err != nil {
			return unsettled("delete from "+table, err)
		}
	}
	if err := l.waitMutations(ctx, eventTables); err != nil {
		return unsettled("delete", err)
	}
	if err := l.rewriteSummary(ctx, stream); err != nil {
		return unsettled("write its summary anew", err)
	}
	if err := l.waitMutations(ctx, []string{"'sessions'"}); err != nil {
		return fail("delete its summary", err)
	}
	return len(due), nil
}

// rewriteSummary deletes the summary of stream in table sessions and writes it
// anew from its events (summaryQuery). It does not wait for the deletion's
// mutation. The two statements go together, whatever ctx (apart, the stream
// would have no summary until Open's repair): they run under a context that
// ctx's end does not cancel, each within the query timeout, and Close waits for
// a pair under way (pairs) instead of cutting it; once Close began, no pair
// starts (eventlog.ErrClosed).
func (l *Log) rewriteSummary(ctx context.Context, stream string) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return eventlog.ErrClosed
	}
	l.pairs.Add(1)
	l.mu.Unlock()
	defer l.pairs.Done()
	ctx = context.WithoutCancel(ctx)
	if err := l.exec(ctx, "ALTER TABLE sessions DELETE WHERE session_id = ?", stream); err != nil {
		return fmt.Errorf("delete it: %w", err)
	}
	if l.betweenSummary != nil {
		l.betweenSummary(stream)
	}
	return l.exec(ctx, summaryQuery, stream)
}

// defaultSettleWait bounds how long the background settlement of compacted
// streams' summaries (settleLater) and Open's repair of them (repairSummaries)
// wait for the mutations of events and event_ids: a mutation ClickHouse cannot
// do is retried by the server for ever (is_done stays 0), and a large table's
// may take long. Past it they give up, say so, and leave the summaries to the
// repair of the log's next Open.
const defaultSettleWait = 10 * time.Minute

// eventTables are the tables whose mutations a summary's rewrite waits for.
var eventTables = []string{"'event_ids'", "'events'"}

// settleLater writes the summary of stream anew in the background, once the
// mutations of events and event_ids are done: DeleteEvents failed after it
// asked for them (its ctx ended while it waited, say). The streams to settle
// are a set (unsettled), worked by one goroutine at a time: a stream queued
// again before its settlement began is settled once. The worker waits up to
// settleWait, then gives up (Open's repairSummaries settles what is left);
// Close stops its wait.
func (l *Log) settleLater(stream string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if l.unsettled == nil {
		l.unsettled = map[string]struct{}{}
		l.settles.Go(func() { l.settle(l.repairCtx) })
	}
	l.unsettled[stream] = struct{}{}
}

// settle is settleLater's worker. Each round waits for the mutations of
// events and event_ids, takes the streams queued by then, waits again, and
// writes their summaries anew; it goes on while more were queued meanwhile. The
// first wait gathers the streams that fail while it runs, so that each is
// settled once; the second covers the mutations of every stream taken, since a
// stream is queued after its mutations were asked for, and so before that wait
// began (the first alone misses a stream queued between its last look and the
// take).
func (l *Log) settle(ctx context.Context) {
	for {
		var streams []string
		err := l.waitEventMutations(ctx)
		if err == nil {
			if l.beforeTake != nil {
				l.beforeTake()
			}
			l.mu.Lock()
			streams = slices.Collect(maps.Keys(l.unsettled))
			clear(l.unsettled)
			l.mu.Unlock()
			err = l.waitEventMutations(ctx)
		}
		if err != nil {
			l.mu.Lock()
			streams = slices.Compact(slices.Sorted(slices.Values(append(streams, slices.Collect(maps.Keys(l.unsettled))...))))
			l.unsettled = nil
			l.mu.Unlock()
			l.cfg.Logger.Warn("eventlog/clickhouse: gave up writing anew the summaries of compacted streams: they count their deleted events until the log is opened again (Open repairs them)",
				"streams", streams, "err", err)
			return
		}
		slices.Sort(streams)
		for _, stream := range streams {
			if err := l.rewriteSummary(ctx, stream); err != nil {
				l.cfg.Logger.Warn("eventlog/clickhouse: the summary of a compacted stream is left as it was: it counts its deleted events until the log is opened again (Open repairs it)",
					"stream", stream, "err", err)
			}
		}
		l.mu.Lock()
		if len(l.unsettled) == 0 {
			l.unsettled = nil
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
	}
}

// waitEventMutations waits, up to settleWait, for the mutations of events and
// event_ids under way.
func (l *Log) waitEventMutations(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, l.settleWait)
	defer cancel()
	err := l.waitMutations(wctx, eventTables)
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		return fmt.Errorf("%w (waited %s)", err, l.settleWait)
	}
	return err
}

// background runs f in a goroutine that Close waits for, with a context that
// ends once the writer stopped; not at all once Close began.
func (l *Log) background(f func(ctx context.Context)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.settles.Go(func() { f(l.repairCtx) })
}

// staleSummariesQuery lists the streams of a range of compactable ones
// (eventlog.PrefixRange: from, end) whose summary in table sessions does not
// count the seqs their events hold: a compaction's process died before it
// wrote the summary anew (or after it deleted it: the summary counts 0).
const staleSummariesQuery = `SELECT session_id FROM (
	SELECT session_id, uniqExact(seq) AS stored FROM events
	WHERE session_id >= ? AND session_id < ?
	GROUP BY session_id
) AS stored_seqs ANY LEFT JOIN (
	SELECT session_id, uniqExactMerge(events) AS counted FROM sessions
	WHERE session_id >= ? AND session_id < ?
	GROUP BY session_id
) AS summaries USING session_id
WHERE stored != counted
ORDER BY session_id`

// repairSummaries writes anew the summaries of the compactable streams that
// do not count their events (staleSummariesQuery), once the mutations of
// events and event_ids under way (a dead process's compaction goes on in the
// server) are done. Open runs it in the background. It reads the seqs of
// every compactable stream, which compaction keeps about as many as their
// live items.
func (l *Log) repairSummaries(ctx context.Context) {
	err := l.waitEventMutations(ctx)
	var repaired []string
	for _, prefix := range eventlog.CompactablePrefixes {
		if err != nil {
			break
		}
		var stale []string
		stale, err = l.staleSummaries(ctx, prefix)
		for _, stream := range stale {
			if err = l.rewriteSummary(ctx, stream); err != nil {
				break
			}
			repaired = append(repaired, stream)
		}
	}
	if len(repaired) > 0 {
		l.cfg.Logger.Info("eventlog/clickhouse: wrote anew the summaries that compactions left stale", "streams", repaired)
	}
	if err != nil && ctx.Err() == nil {
		l.cfg.Logger.Warn("eventlog/clickhouse: could not repair the summaries that compactions left stale: the listings may count deleted events, or miss a knowledge base, until the log is opened again",
			"err", err)
	}
}

// staleSummaries returns the streams of prefix whose summary is stale.
func (l *Log) staleSummaries(ctx context.Context, prefix string) ([]string, error) {
	qctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
	defer cancel()
	from, end := eventlog.PrefixRange(prefix)
	rows, err := l.conn.Query(qctx, staleSummariesQuery, from, end, from, end)
	if err != nil {
		return nil, fmt.Errorf("find the stale summaries: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("find the stale summaries: %w", err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find the stale summaries: %w", err)
	}
	return out, nil
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
