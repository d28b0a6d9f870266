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
	if err := l.submit(ctx, &appendReq{ctx: ctx, flush: true, done: make(chan error, 1)}); err != nil {
		return fmt.Errorf("eventlog/sqlite: %s: write the summaries of the latest appends: %w", what, err)
	}
	return nil
}

// flushLag writes the summary rows that lag, if any, in a transaction of their
// own: when they are due and the writer has nothing queued, and as it stops.
func (l *Log) flushLag() {
	if len(l.w.lag) == 0 && !l.w.marked {
		return
	}
	l.writeGroup([]*appendReq{{ctx: context.Background(), flush: true, done: make(chan error, 1)}})
	if len(l.w.lag) > 0 {
		l.w.lagSince = time.Now() // the write failed: try again in maxLagAge, not at once
	}
}

// repairSummaries rebuilds, from their events, the summary rows of the sessions
// a writer that stopped without writing them left lagging (see the top of this
// file): those with events past the rowid that table summary_lag records, then
// deletes the record. It runs as Open starts, before anything reads the
// summaries; a rebuilt row is what the writer would have written, so a row
// rebuilt that did not lag is left as it was.
func repairSummaries(ctx context.Context, conn *sql.Conn, path string) (err error) {
	var from int64
	switch err := conn.QueryRowContext(ctx, `SELECT from_rowid FROM summary_lag WHERE id = 1`).Scan(&from); {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("eventlog/sqlite: %s: read the record of summaries that lag: %w", path, err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("eventlog/sqlite: %s: rebuild summaries: begin: %w", path, err)
	}
	defer func() {
		if err != nil {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
		}
	}()
	ids, err := laggingSessions(ctx, conn, from)
	if err != nil {
		return fmt.Errorf("eventlog/sqlite: %s: rebuild summaries: %w", path, err)
	}
	for _, id := range ids {
		d, err := recount(ctx, conn, id)
		if err != nil {
			return fmt.Errorf("eventlog/sqlite: %s: rebuild the summary of session %s: %w", path, id, err)
		}
		if _, err := conn.ExecContext(ctx, `INSERT OR REPLACE INTO sessions (session_id, status, status_seq, events, steps, last_seq, started_us, updated_us, tasks, ended)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, d.id, d.status, int64(d.statusSeq), int64(d.events), int64(d.steps), int64(d.lastSeq),
			d.startedUS, d.updatedUS, int64(d.tasks), int64(d.ended)); err != nil {
			return fmt.Errorf("eventlog/sqlite: %s: rebuild the summary of session %s: %w", path, id, err)
		}
	}
	if _, err := conn.ExecContext(ctx, `DELETE FROM summary_lag`); err != nil {
		return fmt.Errorf("eventlog/sqlite: %s: rebuild summaries: delete the record: %w", path, err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("eventlog/sqlite: %s: rebuild summaries: commit: %w", path, err)
	}
	return nil
}

// recount is the delta of all the stored events of session id: its summary row.
func recount(ctx context.Context, conn *sql.Conn, id string) (sessionDelta, error) {
	rows, err := conn.QueryContext(ctx, `SELECT type, seq, ts FROM events WHERE session_id = ? ORDER BY seq`, id)
	if err != nil {
		return sessionDelta{}, err
	}
	defer rows.Close()
	var d sessionDelta
	for n := 0; rows.Next(); n++ {
		var (
			typ string
			seq uint64
			ts  int64
		)
		if err := rows.Scan(&typ, &seq, &ts); err != nil {
			return sessionDelta{}, err
		}
		if n == 0 {
			d = newDelta(id, ts)
		}
		d.add(messages.Type(typ), seq, ts)
	}
	return d, rows.Err()
}

// lagged returns, for a read-only Log, the summaries of the sessions whose rows
// may lag their events (those with events past the rowid table summary_lag
// records), rebuilt from their events: a live writer's of at most maxLagAge, or
// a writer's that was killed, which the next Open rebuilds. Nil when no row lags.
// A database of an older schema, which has no such table, has none.
func (l *Log) lagged(ctx context.Context) (map[string]eventlog.SessionInfo, error) {
	conn, err := l.rdb.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	// One read transaction: the record and the events it points past are of one
	// commit of the writer's.
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		return nil, err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK") //nolint:errcheck // a read transaction: nothing to undo
	var from int64
	switch err := conn.QueryRowContext(ctx, `SELECT from_rowid FROM summary_lag WHERE id = 1`).Scan(&from); {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read the record of summaries that lag: %w", err)
	}
	ids, err := laggingSessions(ctx, conn, from)
	if err != nil {
		return nil, err
	}
	infos := make(map[string]eventlog.SessionInfo, len(ids))
	for _, id := range ids {
		d, err := recount(ctx, conn, id)
		if err != nil {
			return nil, fmt.Errorf("rebuild the summary of session %s: %w", id, err)
		}
		var parent sql.NullString
		if err := conn.QueryRowContext(ctx, `SELECT `+payloadField("p", "$.parent.session_id")+` FROM events p
			WHERE p.session_id = ? AND p.seq = 1 AND p.type = 'task.submitted'`, id).Scan(&parent); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("rebuild the summary of session %s: its parent: %w", id, err)
		}
		infos[id] = eventlog.SessionInfo{
			ID:        id,
			Status:    eventlog.SessionStatus(d.status, uint64(d.tasks), uint64(d.ended)),
			Events:    d.events,
			LastSeq:   d.lastSeq,
			Steps:     d.steps,
			StartedUS: d.startedUS,
			UpdatedUS: d.updatedUS,
			Parent:    parent.String,
		}
	}
	return infos, nil
}

// laggingSessions lists the sessions with events past rowid from.
func laggingSessions(ctx context.Context, conn *sql.Conn, from int64) ([]string, error) {
	rows, err := conn.QueryContext(ctx, `SELECT DISTINCT session_id FROM events WHERE rowid > ?`, from)
	if err != nil {
		return nil, fmt.Errorf("list the sessions of summaries that lag: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("list the sessions of summaries that lag: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the sessions of summaries that lag: %w", err)
	}
	return ids, nil
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
