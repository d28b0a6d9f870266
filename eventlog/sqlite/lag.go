package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// Summaries that lag behind the events.
//
// Each session's summary row (table sessions) is derived from its events. Under
// load the writer does not update it in the transaction that appends the events:
// it keeps what the transaction adds to each session's row (sessionDelta) in
// memory, and writes the rows later, in a later transaction, once per session for
// all the batches appended meanwhile. A task of two steps appends four batches of
// one session; their rows cost one statement instead of four, and none on the
// commit path of the three later batches, which every session of the node waits
// on (the writer is one goroutine). The summaries were a fifth of the writer's
// work at 64 concurrent sessions.
//
// What a reader sees is what it saw before:
//   - This process's readers of the summary table (Sessions, and through it the
//     running sessions a node resumes, the dashboard's lists) have the writer
//     write the rows that lag first (syncSummaries): they see every append that
//     returned.
//   - A write that depends on the rows (a prune, a compaction) or on nothing of
//     them (an Own, a Release, a snapshot, a probe) writes the rows that lag
//     first, in its transaction, before it runs: a stream is never pruned by an
//     updated_us that lags, and a compaction's count applies to a row that holds
//     every event it had.
//   - A lone batch, the writer having nothing else queued, writes its rows and
//     those that lag at once, as before: rows lag only under load.
//   - Rows lag by at most maxLagAge or maxLagSessions sessions: past either, the
//     next transaction writes them. Close writes them.
//   - A crash loses the rows that lag, not the events: the transaction that
//     starts a lag records in table summary_lag the highest rowid of events
//     before it; Open rebuilds the rows of the sessions with events past it from
//     their events (repairSummaries), before anything reads the summaries, and
//     the transaction that writes the rows that lag deletes the record.
//   - A read-only Log (replay's, a dashboard beside a node) lists the sessions
//     with events past the record rebuilt from their events (lagged, overlay):
//     it sees the rows of a live writer that lag, and those a killed one left
//     before the next Open rebuilds them. Only readers of the table itself (the
//     sqlite3 shell) may see rows that lag, by at most maxLagAge while the
//     writer lives.
//   - Only a writer alone on its file defers (not Config.Shared): other processes
//     sharing the log read the table, and a crash of one would leave rows that
//     the others cannot tell from rows being written.

const (
	// maxLagAge bounds how long a session's summary row may lag its events.
	maxLagAge = 100 * time.Millisecond
	// maxLagSessions bounds the sessions whose rows may lag at once: the
	// transaction that writes them costs a statement or two each.
	maxLagSessions = 1024
)

// lagState is the writer's state of the summaries (writeStmts embeds it).
type lagState struct {
	// txDeltas are the deltas of the transaction being written, a run of them
	// per append request (apply), in the order of the requests; those before
	// consumed were written in the transaction already (summarizeNow).
	txDeltas []sessionDelta
	consumed int
	// lag are the deltas of committed transactions not yet written to the
	// summary table, one per session, since lagSince. lagInTx: the transaction
	// being written wrote them.
	lag      map[string]sessionDelta
	lagSince time.Time
	lagInTx  bool
	// marked: table summary_lag holds a record (committed). markedInTx: the
	// transaction being written recorded one, or (cleared) deleted it.
	marked, markedInTx, clearedInTx bool
	// flushing and flushIdx are summarizeNow's, reused.
	flushing []sessionDelta
	flushIdx map[string]int

	// markLag records the highest rowid of events in table summary_lag, clearLag
	// deletes the record.
	markLag, clearLag driver.Stmt
}

// beginSummaries starts the summaries of a transaction of reqs, and says whether
// it defers them: it has other requests queued with it, all of them appends, by
// a writer alone on its file, and the rows that lag are within their bounds.
func (l *Log) beginSummaries(reqs []*appendReq) bool {
	w := &l.w
	clear(w.txDeltas)
	w.txDeltas, w.consumed = w.txDeltas[:0], 0
	w.lagInTx, w.markedInTx, w.clearedInTx = false, false, false
	if l.cfg.Shared || len(reqs) < 2 {
		return false
	}
	for _, r := range reqs {
		if !r.appends() {
			return false
		}
	}
	return len(w.lag) == 0 || (len(w.lag) < maxLagSessions && time.Since(w.lagSince) < maxLagAge)
}

// markSummaries records, in a transaction that defers its summaries while none
// lag, the highest rowid of the events before it: the sessions of the events past
// it are those whose rows may lag (repairSummaries). It runs before the
// transaction inserts anything.
func (l *Log) markSummaries(ctx context.Context) error {
	if len(l.w.lag) > 0 || l.w.marked {
		return nil // the record of the lag under way covers this transaction too
	}
	if _, err := l.w.exec(ctx, l.w.markLag); err != nil {
		return fmt.Errorf("eventlog/sqlite: append: record that summaries lag: %w", err)
	}
	l.w.markedInTx = true
	return nil
}

// summarizeNow writes, in the transaction being written, the rows that lag and
// the deltas of the transaction so far, and deletes the record of the lag.
func (l *Log) summarizeNow(ctx context.Context) error {
	w := &l.w
	if w.flushIdx == nil {
		w.flushIdx = make(map[string]int)
	}
	clear(w.flushIdx)
	clear(w.flushing)
	w.flushing = w.flushing[:0]
	add := func(d sessionDelta) {
		if i, ok := w.flushIdx[d.id]; ok {
			w.flushing[i].merge(d)
			return
		}
		w.flushIdx[d.id] = len(w.flushing)
		w.flushing = append(w.flushing, d)
	}
	if !w.lagInTx {
		for _, d := range w.lag {
			add(d)
		}
	}
	for _, d := range w.txDeltas[w.consumed:] {
		add(d)
	}
	w.consumed = len(w.txDeltas)
	if err := l.summarize(ctx, w.flushing); err != nil {
		return err
	}
	w.lagInTx = true
	if (w.marked || w.markedInTx) && !w.clearedInTx {
		if _, err := w.exec(ctx, w.clearLag); err != nil {
			return fmt.Errorf("eventlog/sqlite: append: delete the record that summaries lag: %w", err)
		}
		w.clearedInTx = true
	}
	return nil
}

// keepSummaries updates the writer's state of the summaries once the
// transaction committed: what it wrote no longer lags, and what it deferred does.
func (l *Log) keepSummaries(deferred bool) {
	w := &l.w
	if w.lagInTx {
		clear(w.lag)
	}
	switch {
	case w.clearedInTx:
		w.marked = false
	case w.markedInTx:
		w.marked = true
	}
	if deferred && w.consumed < len(w.txDeltas) {
		if w.lag == nil {
			w.lag = make(map[string]sessionDelta)
		}
		if len(w.lag) == 0 {
			w.lagSince = time.Now()
		}
		for _, d := range w.txDeltas[w.consumed:] {
			if o, ok := w.lag[d.id]; ok {
				o.merge(d)
				d = o
			}
			w.lag[d.id] = d
		}
	}
	l.lagging.Store(len(w.lag) > 0)
}

// syncSummaries has the writer write the summary rows that lag, if any, so that
// a read of the summary table that follows sees every append that returned.
func (l *Log) syncSummaries(ctx context.Context, what string) error {
	if !l.lagging.Load() {
		return nil
	}
	if err := l.submit(ctx, flushReq(ctx)); err != nil {
		return fmt.Errorf("eventlog/sqlite: %s: write the summaries of the latest appends: %w", what, err)
	}
	return nil
}

// flushReq is a request that writes the summary rows that lag.
func flushReq(ctx context.Context) *appendReq {
	return &appendReq{ctx: ctx, flush: true, done: make(chan error, 1)}
}

// flushLag writes the summary rows that lag, if any, in a transaction of their
// own: when they are due and the writer has nothing queued, and as it stops.
func (l *Log) flushLag() {
	if len(l.w.lag) == 0 && !l.w.marked {
		return
	}
	l.writeGroup([]*appendReq{flushReq(context.Background())})
	if len(l.w.lag) > 0 {
		l.w.lagSince = time.Now() // the write failed: try again in maxLagAge, not at once
	}
}

// querier is what the rebuilds read through: a connection or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// lagMark returns the rowid table summary_lag records, and whether it records
// one (a log of a schema before 12 has no such table, and so no lag).
func lagMark(ctx context.Context, q querier) (from int64, ok bool, err error) {
	var tables int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'summary_lag'`).Scan(&tables); err != nil {
		return 0, false, fmt.Errorf("look up the record of summaries that lag: %w", err)
	}
	if tables == 0 {
		return 0, false, nil
	}
	switch err := q.QueryRowContext(ctx, `SELECT from_rowid FROM summary_lag WHERE id = 1`).Scan(&from); {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("read the record of summaries that lag: %w", err)
	}
	return from, true, nil
}

// pastMark returns what the events past rowid from add to their sessions' rows,
// a delta per session, in one scan of the rowid range. While table summary_lag
// records from, the rows hold exactly the events up to it: the transaction that
// records it is the first whose rows lag (none lagged before), and a
// transaction that writes the rows that lag deletes the record in the same
// commit. A row plus its session's delta is then the row the writer would have
// written, whatever the row holds that the stored events no longer show (the
// counts of a compacted stream's deleted events, its earlier start).
func pastMark(ctx context.Context, q querier, from int64) ([]sessionDelta, error) {
	rows, err := q.QueryContext(ctx, `SELECT session_id, type, seq, ts FROM events WHERE rowid > ? ORDER BY rowid`, from)
	if err != nil {
		return nil, fmt.Errorf("read the events of summaries that lag: %w", err)
	}
	defer rows.Close()
	var (
		deltas []sessionDelta
		index  = map[string]int{}
	)
	for rows.Next() {
		var (
			id, typ string
			seq     uint64
			ts      int64
		)
		if err := rows.Scan(&id, &typ, &seq, &ts); err != nil {
			return nil, fmt.Errorf("read the events of summaries that lag: %w", err)
		}
		i, ok := index[id]
		if !ok {
			i = len(deltas)
			index[id] = i
			deltas = append(deltas, newDelta(id, ts))
		}
		deltas[i].add(messages.Type(typ), seq, ts)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the events of summaries that lag: %w", err)
	}
	return deltas, nil
}

// repairSummaries writes the summary rows a writer that stopped without writing
// them left lagging (see the top of this file): the deltas of the events past
// the rowid table summary_lag records, added to the rows as the writer adds
// them; then it deletes the record. It runs as Open starts, before any migration
// (a step that rebuilt table events would renumber its rowids) and before
// anything reads the summaries. The record is read again under the write lock:
// of two processes opening a Shared log at once, one repairs.
func repairSummaries(ctx context.Context, conn *sql.Conn, path string) (err error) {
	// A log of a newer build is left as it is, for migrate to refuse: its
	// summaries and record may mean what this build does not know. The statements
	// below are schema 12's, which every build that repairs must still read.
	var version int
	if err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("eventlog/sqlite: read schema version of %s: %w", path, err)
	}
	if version > SchemaVersion {
		return nil
	}
	if _, ok, err := lagMark(ctx, conn); err != nil || !ok {
		if err != nil {
			return fmt.Errorf("eventlog/sqlite: %s: %w", path, err)
		}
		return nil
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("eventlog/sqlite: %s: rebuild summaries: begin: %w", path, err)
	}
	defer func() {
		if err != nil {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	from, ok, err := lagMark(ctx, conn)
	if err != nil {
		return fmt.Errorf("eventlog/sqlite: %s: %w", path, err)
	}
	if ok {
		deltas, err := pastMark(ctx, conn, from)
		if err != nil {
			return fmt.Errorf("eventlog/sqlite: %s: %w", path, err)
		}
		for _, d := range deltas {
			if _, err := conn.ExecContext(ctx, summarizeQuery, d.id, d.status, int64(d.statusSeq), int64(d.events), int64(d.steps),
				int64(d.lastSeq), d.startedUS, d.updatedUS, int64(d.tasks), int64(d.ended)); err != nil {
				return fmt.Errorf("eventlog/sqlite: %s: rebuild the summary of session %s: %w", path, d.id, err)
			}
			if _, err := conn.ExecContext(ctx, restartQuery, d.startedUS, d.id, d.startedUS); err != nil {
				return fmt.Errorf("eventlog/sqlite: %s: rebuild the start of session %s: %w", path, d.id, err)
			}
		}
		if _, err := conn.ExecContext(ctx, `DELETE FROM summary_lag`); err != nil {
			return fmt.Errorf("eventlog/sqlite: %s: rebuild summaries: delete the record: %w", path, err)
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("eventlog/sqlite: %s: rebuild summaries: commit: %w", path, err)
	}
	return nil
}

// rebuildLagged returns the summaries of the sessions whose rows lag their events,
// rebuilt (pastMark), read in q's transaction: a live writer's of at most
// maxLagAge, or those of a writer that was killed, which the next Open writes.
// Nil when no row lags.
func rebuildLagged(ctx context.Context, q querier) (map[string]eventlog.SessionInfo, error) {
	from, ok, err := lagMark(ctx, q)
	if err != nil || !ok {
		return nil, err
	}
	deltas, err := pastMark(ctx, q, from)
	if err != nil {
		return nil, err
	}
	infos := make(map[string]eventlog.SessionInfo, len(deltas))
	for _, d := range deltas {
		var row sessionDelta
		var parent sql.NullString
		switch err := q.QueryRowContext(ctx, `SELECT status, status_seq, events, steps, last_seq, started_us, updated_us, tasks, ended, `+sessionParent+`
			FROM sessions WHERE session_id = ?`, d.id).Scan(&row.status, &row.statusSeq, &row.events, &row.steps, &row.lastSeq,
			&row.startedUS, &row.updatedUS, &row.tasks, &row.ended, &parent); {
		case errors.Is(err, sql.ErrNoRows):
			row = d
			if err := q.QueryRowContext(ctx, `SELECT `+payloadField("p", "$.parent.session_id")+` FROM events p
				WHERE p.session_id = ? AND p.seq = 1 AND p.type = 'task.submitted'`, d.id).Scan(&parent); err != nil && !errors.Is(err, sql.ErrNoRows) {
				return nil, fmt.Errorf("rebuild the summary of session %s: its parent: %w", d.id, err)
			}
		case err != nil:
			return nil, fmt.Errorf("rebuild the summary of session %s: %w", d.id, err)
		default:
			row.merge(d)
		}
		infos[d.id] = eventlog.SessionInfo{
			ID:        d.id,
			Status:    eventlog.SessionStatus(row.status, uint64(row.tasks), uint64(row.ended)),
			Events:    row.events,
			LastSeq:   row.lastSeq,
			Steps:     row.steps,
			StartedUS: row.startedUS,
			UpdatedUS: row.updatedUS,
			Parent:    parent.String,
		}
	}
	return infos, nil
}

// keepAgent drops from lagged the sessions whose agent (sessionAgent) is not
// agent, read in q's transaction: the listing's SQL reads the agent from the
// events, not from the lagging summary, so it lists those that are agent's only.
func keepAgent(ctx context.Context, q querier, lagged map[string]eventlog.SessionInfo, agent string) error {
	for id := range lagged {
		var got sql.NullString
		err := q.QueryRowContext(ctx, `SELECT `+sessionAgent+` FROM (SELECT ? AS session_id) sessions`, id).Scan(&got)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("the agent of session %s: %w", id, err)
		}
		if got.String != agent {
			delete(lagged, id)
		}
	}
	return nil
}

// overlay puts the rebuilt summaries of lagged in place of the rows listed for
// them: a listing of f with limit rows more than asked (their rows may be among
// those it listed) loses those rows, gains the rebuilt summaries that f keeps, and
// is cut to f's limit again, in the listing's order.
func overlay(listed []eventlog.SessionInfo, lagged map[string]eventlog.SessionInfo, f eventlog.Filter, since int64) []eventlog.SessionInfo {
	out := listed[:0]
	for _, i := range listed {
		if _, ok := lagged[i.ID]; !ok {
			out = append(out, i)
		}
	}
	for _, i := range lagged {
		switch {
		case i.StartedUS < since,
			f.Status != "" && i.Status != f.Status,
			f.Prefix != "" && !strings.HasPrefix(i.ID, f.Prefix),
			f.UpdatedSinceUS != 0 && i.UpdatedUS < f.UpdatedSinceUS,
			f.SessionsOnly && !eventlog.IsSession(i.ID):
			continue
		}
		out = append(out, i)
	}
	slices.SortFunc(out, func(a, b eventlog.SessionInfo) int {
		if c := cmp.Compare(b.StartedUS, a.StartedUS); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out
}
