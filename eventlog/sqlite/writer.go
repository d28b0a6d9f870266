package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// ErrBusy means the database stayed locked by another connection for longer than
// Config.BusyTimeout: the writer of another process sharing the log (Config.Shared)
// that holds it for long, a checkpoint, an sqlite3 shell. An Append that fails with
// it wrote nothing; it is neither ErrSeqConflict nor ErrInvalidEvent, and retrying
// it may succeed: it says so (Temporary), so readers that must succeed
// (eventlog.ClassifyFailure) wait it out.
var ErrBusy error = busyError{}

// busyError is ErrBusy's type: a comparable value, so errors.Is finds it.
type busyError struct{}

func (busyError) Error() string { return "eventlog/sqlite: database is busy" }

// Temporary reports that the lock may be released: a retry may succeed.
func (busyError) Temporary() bool { return true }

// busyErr marks err with ErrBusy if SQLite reported SQLITE_BUSY (in any of its
// extended forms) once the busy timeout ran out.
func (l *Log) busyErr(err error) error {
	var e *msqlite.Error
	if !errors.As(err, &e) || e.Code()&0xff != sqlite3.SQLITE_BUSY || errors.Is(err, ErrBusy) {
		return err
	}
	return fmt.Errorf("%w: another connection, such as another process sharing %s, held it for longer than BusyTimeout (%s); retry: %w",
		ErrBusy, l.path, l.cfg.BusyTimeout, err)
}

// fullErr marks err with eventlog.ErrFull if SQLite reported SQLITE_FULL: the disk
// (or the filesystem's quota) had no room for the transaction, which SQLite then
// rolled back. Nothing of it is stored.
func (l *Log) fullErr(err error) error {
	var e *msqlite.Error
	if !errors.As(err, &e) || e.Code()&0xff != sqlite3.SQLITE_FULL || errors.Is(err, eventlog.ErrFull) {
		return err
	}
	return fmt.Errorf("%w: nothing was written; free space on the filesystem of %s: %w", eventlog.ErrFull, l.path, err)
}

// noTransaction reports whether err is SQLite's answer to a ROLLBACK with no
// transaction open: one that SQLite rolled back itself, as it may on a full disk
// or an I/O error.
func noTransaction(err error) bool {
	var e *msqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_ERROR && strings.Contains(err.Error(), "no transaction is active")
}

// firstConn opens the writer's connection, which sets the pragmas. Switching a
// fresh database to WAL mode while another process does the same can fail with
// SQLITE_BUSY at once, without waiting for the busy timeout (SQLite refuses to wait
// where waiting could deadlock): firstConn tries again, with a growing pause, until
// BusyTimeout has passed.
func (l *Log) firstConn(ctx context.Context) (*sql.Conn, error) {
	deadline := time.Now().Add(l.cfg.BusyTimeout)
	pause := time.Millisecond
	for {
		c, err := l.wdb.Conn(ctx)
		var e *msqlite.Error
		if err == nil || !errors.As(err, &e) || e.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return c, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// maxGroupBytes bounds the payload bytes the writer coalesces into one transaction,
// so that a few large payloads do not make one huge transaction of many callers.
const maxGroupBytes = 16 << 20

// appendReq is one Append (or AppendLeased, or Own) call waiting for the writer.
type appendReq struct {
	ctx     context.Context
	events  []messages.Envelope    // checked by eventlog.CheckBatch
	lease   *eventlog.Lease        // AppendLeased's; nil for Append
	claim   bool                   // Claim or ClaimLeased: only into a session with no events
	own     *ownReq                // set for Own, which has no events
	free    *releaseReq            // set for Release, which has no events
	prune   *pruneReq              // set for PruneStreams and PruneListed, which have no events
	compact *compactReq            // set for DeleteEvents, which has no events
	snap    *eventlog.FoldSnapshot // set for SaveSnapshot, which has no events
	probe   bool                   // set for Writable's probe write, which has no events
	flush   bool                   // set for syncSummaries, which writes the summary rows that lag (lag.go)
	done    chan error             // buffered: the writer never blocks on it
	pooled  bool                   // from Log.reqPool, to go back once answered
}

// appends reports whether r appends events: Own, Release, prune, compaction and
// snapshot calls, probes and flushes do not.
func (r *appendReq) appends() bool {
	return r.own == nil && r.free == nil && r.prune == nil && r.compact == nil && r.snap == nil && !r.probe && !r.flush
}

// ownReq is an Own (or TakeOver) call: the writer sets epoch, and previous,
// before it answers.
type ownReq struct {
	node       string
	partitions []int
	epoch      uint64
	// previous is each partition's latest owner record before epoch, read in the
	// transaction that records epoch (eventlog.Releasing.TakeOver).
	previous map[int]eventlog.Ownership
}

// releaseReq is a Release call, or a MarkPublished one (mark set).
type releaseReq struct {
	node       string
	epoch      uint64
	partitions []int
	atUS       int64
	mark       bool
}

// writeStmts are the statements of the writer, prepared once on its connection and
// run on the driver's connection (sql.Conn.Raw), without database/sql's bookkeeping
// of every call: only the writer goroutine uses that connection. Transactions are
// driven with plain BEGIN/COMMIT statements on it.
type writeStmts struct {
	begin, commit, rollback        driver.Stmt
	savepoint, release, undo       driver.Stmt
	insert, byID, byPos, summarize driver.Stmt
	touch, settle, create          driver.Stmt
	claimed                        driver.Stmt // whether a session has events, and their highest epoch
	hasEvents                      driver.Stmt // whether a session has events: claimed without a lease
	// insertRows[k-2] inserts k events in one statement (see apply).
	insertRows                   [maxInsertRows - 1]driver.Stmt
	restart                      driver.Stmt
	current, maxEpoch, takeOwner driver.Stmt
	owner                        driver.Stmt
	releaseOwner, markOwner      driver.Stmt
	saveSnapshot                 driver.Stmt
	aliased, addAlias            driver.Stmt
	dropProbe                    driver.Stmt // deletes the row of Writable's probe
	pruneAliases, pruneEvents    driver.Stmt // PruneStreams's, in this order,
	pruneSessions                driver.Stmt // then this one
	// PruneListed's, of one stream each, in this order.
	pruneListedAliases, pruneListedEvents, pruneListedSessions driver.Stmt
	// DeleteEvents's: a stream's last seq, then per event its alias and itself,
	// then the summary's count; and the lookup of a hole (checkHole).
	lastSeq, compactAlias, compactEvent, compactSummary, holeAt driver.Stmt

	args [insertColumns * maxInsertRows]driver.NamedValue // the arguments of the statement being run
	vals [insertColumns]driver.Value                      // apply's, for insert
	row  [4]driver.Value                                  // the row a query returned
	// The texts and small payloads of the rows an insert binds (rowValues): apply's
	// row, and the rows pending. The driver copies a bound value into memory of its
	// own as it binds it, and frees that once the statement ran; the writer's
	// values are cleared then (exec, dropRows), so the buffers are refilled from the
	// start, by the writer goroutine only. One that grew past maxPackBuffer (long
	// texts) is let go.
	pack, pendPack []byte

	// The rows of the group's batches not yet inserted (see Log.pendRow): their
	// values, and their events' keys, for a lookup that must see them and for
	// errors. They are inserted maxInsertRows at a time, and before the
	// transaction commits.
	pend     [insertColumns * maxInsertRows]driver.Value
	pendKeys []pendingKey

	// Strings that repeat from event to event, kept as driver.Values: a string made
	// a driver.Value is copied to the heap each time.
	session lastValue
	names   map[string]driver.Value // statuses: a few
	// The last two timestamps (an agent's step stamps its events alike).
	ts [2]lastInt
	lagState

	// started holds, for sessions written lately, a start their committed summary
	// row is at or before: a batch that starts no earlier needs no restart
	// statement. A row's started_us only ever goes down, in this process or any
	// other sharing the log, and only the rows of prunable streams are ever
	// deleted (eventlog.Pruner), whose starts are not kept (prunable): a stream
	// pruned and stored again gets a row that starts anew. So the bound stays
	// true. starting are the starts of the transaction being written, kept in
	// started once it commits.
	started  map[string]int64
	starting []sessionStart

	// tails holds, for sessions the writer appended to lately under a lease, the
	// last event it committed: its seq and epoch, which are stored for good
	// (epochStart). tailing are the leased events of the transaction being written,
	// kept in tails once it commits.
	tails   map[string]sessionTail
	tailing []sessionTail

	// epochs are the current epochs of partitions as the writer read them. A
	// transaction holds the write lock, so within it only its own Own requests
	// change them; without Config.Shared the writer is the only one of the file
	// (the directory's lock), so they hold across its transactions too, until one
	// of its Own requests or a rollback.
	epochs map[int]int64

	// aliases is whether table aliases may hold IDs, read at the start of each
	// transaction and set when the transaction adds one: only then may a derived ID
	// be stored at another position than its own (see checkID). A log without
	// Shared has no other writer (the directory's lock): it reads the table once
	// (aliasesRead) and then knows what this writer adds; a rolled back addition
	// leaves it set, which costs lookups only.
	aliases, aliasesRead bool
}

// sessionStart is a session's start as a batch of the writer's transaction leaves it.
type sessionStart struct {
	id string
	us int64
}

// maxStarted bounds writeStmts.started: past it, the map is emptied.
const maxStarted = 4096

// startedBy reports whether the summary row of session id is known to start at or
// before us.
func (w *writeStmts) startedBy(id string, us int64) bool {
	s, ok := w.started[id]
	return ok && s <= us
}

// prunable reports whether stream id may be pruned (eventlog.PrunablePrefixes):
// its summary row may be deleted, by this process or another sharing the log, so
// what the writer saw of that row bounds nothing of the row the stream, stored
// again, gets (writeStmts.started, writeStmts.tails). Such streams are few and
// seldom written (a large message's, an MCP session's, a task's push configs):
// not knowing them costs a statement now and then. It allocates nothing.
func prunable(id string) bool {
	for _, p := range eventlog.PrunablePrefixes {
		if strings.HasPrefix(id, p) {
			return true
		}
	}
	return false
}

// keepStarts records the starts of a transaction that committed.
func (w *writeStmts) keepStarts() {
	if w.started == nil || len(w.started)+len(w.starting) > maxStarted {
		w.started = make(map[string]int64, min(maxStarted, 64))
	}
	for _, s := range w.starting {
		if prunable(s.id) {
			continue
		}
		if v, ok := w.started[s.id]; !ok || s.us < v {
			w.started[s.id] = s.us
		}
	}
	clear(w.starting)
	w.starting = w.starting[:0]
}

// insertColumns are the values an insert binds per row (rowValues); maxInsertRows
// bounds the events one INSERT statement writes. The more rows a statement, the
// less each costs.
const (
	insertColumns = 12
	maxInsertRows = 18
)

// maxPackBuffer bounds the buffers of rows the writer keeps for the next insert
// (writeStmts.pack): one that grew for long texts is left to the collector.
// maxPackedPayload bounds the payloads an insert binds in a row's pack, with its
// texts: the rows of a statement with such payloads fit the buffer.
const (
	maxPackBuffer    = 64 << 10
	maxPackedPayload = 2 << 10
)

// insertQuery is the INSERT of k events. A row whose position or ID is taken is
// skipped: the writer then finds out which key was taken. OR IGNORE rather than ON
// CONFLICT DO NOTHING: both skip such a row, but under DO NOTHING a NOT NULL column
// could still abort the statement, so SQLite copied every page the statement
// changed into a statement journal first; under OR IGNORE no constraint aborts,
// and nothing is copied. No column is ever bound NULL (CheckBatch), so the two skip
// the same rows.
//
// A row binds its text columns and its payload as one blob (rowValues), cut by
// the ends of its pieces: the driver copies every text or blob value it binds, and
// keeps a list of them grown by doubling on every statement, which cost a
// two-event batch (14 such values) about 500 bytes of garbage, where one blob a row
// costs 48. A payload over maxPackedPayload is bound alone instead, in place of
// the actor's end in the blob (told apart by its storage class): copied into the
// blob on the heap, and out of it by substr, a large one would cost far more
// than the driver's list (TestInsertDoesNotCopyALargePayload). substr of a blob
// counts bytes and returns a blob, which CAST makes TEXT of the same bytes (the
// database's encoding is UTF-8): each column stores the value, and the storage
// class, that binding it alone stored. The rows are a VALUES list of anonymous
// parameters, each bound once, which the SELECT cuts: a parameter named to be
// read twice (?NNN) costs an allocation per row in the driver, which reads every
// parameter's name as it binds.
func insertQuery(k int) string {
	row := "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	// In rowValues's order: the pack, the payload or the actor's end in the pack,
	// seq, version, ts, epoch, epoch_start, then where each of the first five
	// texts ends in the pack.
	pack, end := "column1", func(j int) string { return "column" + strconv.Itoa(7+j) }
	text := func(j int) string {
		if j == 1 {
			return "CAST(substr(" + pack + ", 1, " + end(1) + ") AS TEXT)"
		}
		return "CAST(substr(" + pack + ", " + end(j-1) + " + 1, " + end(j) + " - " + end(j-1) + ") AS TEXT)"
	}
	packed := "typeof(column2) = 'integer'"
	actor := "CAST(substr(" + pack + ", " + end(5) + " + 1, CASE WHEN " + packed + " THEN column2 - " + end(5) + " ELSE length(" + pack + ") END) AS TEXT)"
	payload := "CASE WHEN " + packed + " THEN substr(" + pack + ", column2 + 1) ELSE column2 END"
	return `INSERT OR IGNORE INTO events (session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload, epoch, epoch_start)
			SELECT ` + text(1) + `, column3, ` + text(2) + `, ` + text(3) + `, column4, ` + text(4) + `, ` + text(5) + `, column5, ` +
		actor + `, ` + payload + `, column6, column7
			FROM (VALUES ` + strings.Repeat(row+", ", k-1) + row + `)`
}

// errInsertedFewer says an INSERT of several events wrote fewer than all of them: a
// key was taken. The group is written again an event at a time, to tell which.
var errInsertedFewer = errors.New("eventlog/sqlite: an insert of several events wrote fewer")

// maxNames bounds writeStmts.names: past it, names are not kept.
const maxNames = 256

// lastValue is the driver.Value of the last string it was asked for.
type lastValue struct {
	s string
	v driver.Value
}

func (l *lastValue) of(s string) driver.Value {
	if l.v == nil || l.s != s {
		l.s, l.v = s, s
	}
	return l.v
}

// lastInt is the driver.Value of the last int64 it was asked for.
type lastInt struct {
	n int64
	v driver.Value
}

// stamp returns ts as a driver.Value, reusing one of the last two made.
func (w *writeStmts) stamp(ts int64) driver.Value {
	for i := range w.ts {
		if w.ts[i].v != nil && w.ts[i].n == ts {
			return w.ts[i].v
		}
	}
	w.ts[1] = w.ts[0]
	w.ts[0] = lastInt{ts, ts}
	return w.ts[0].v
}

// name returns s as a driver.Value, kept for next time.
func (w *writeStmts) name(s string) driver.Value {
	if v, ok := w.names[s]; ok {
		return v
	}
	if w.names == nil {
		w.names = map[string]driver.Value{}
	}
	var v driver.Value = s
	if len(w.names) < maxNames {
		w.names[s] = v
	}
	return v
}

// errNoRows is what queryRow returns when the query returned no row.
var errNoRows = errors.New("no rows")

func (w *writeStmts) prepare(ctx context.Context, dc any) error {
	c, ok := dc.(driver.ConnPrepareContext)
	if !ok {
		return fmt.Errorf("the driver's connection (%T) cannot prepare statements with a context", dc)
	}
	type prep struct {
		stmt  *driver.Stmt
		query string
	}
	var rows []prep
	for k := 2; k <= maxInsertRows; k++ {
		rows = append(rows, prep{&w.insertRows[k-2], insertQuery(k)})
	}
	for _, s := range append(rows, []prep{
		{&w.begin, "BEGIN IMMEDIATE"},
		{&w.commit, "COMMIT"},
		{&w.rollback, "ROLLBACK"},
		{&w.savepoint, "SAVEPOINT batch"},
		{&w.release, "RELEASE batch"},
		{&w.undo, "ROLLBACK TO batch"},
		{&w.insert, insertQuery(1)},
		// The event with a non-derived ID (the index events_by_id); an event with a
		// derived ID is found by its position (Log.storedAt).
		{&w.byID, `SELECT session_id, seq, epoch FROM events WHERE id = ? AND NOT (` + derivedWhere + `)`},
		{&w.aliased, `SELECT EXISTS (SELECT 1 FROM aliases)`},
		{&w.addAlias, `INSERT OR IGNORE INTO aliases (id) VALUES (?)`},
		{&w.dropProbe, `DELETE FROM aliases WHERE id = ''`},
		{&w.byPos, `SELECT id, epoch FROM events WHERE session_id = ? AND seq = ?`},
		// Whether a session has events (its first by the primary key), and the
		// highest epoch of its leased ones (the partial index events_by_epoch_start,
		// whose highest is theirs: see epochStartWhere).
		{&w.claimed, `SELECT EXISTS (SELECT 1 FROM events WHERE session_id = ?),
			coalesce((SELECT epoch FROM events INDEXED BY events_by_epoch_start
				WHERE session_id = ? AND ` + epochStartWhere + ` ORDER BY epoch DESC LIMIT 1), 0)`},
		{&w.hasEvents, `SELECT EXISTS (SELECT 1 FROM events WHERE session_id = ?)`},
		{&w.current, `SELECT coalesce(max(epoch), 0) FROM ownership WHERE partition = ?`},
		{&w.maxEpoch, `SELECT coalesce(max(epoch), 0) FROM ownership`},
		{&w.takeOwner, `INSERT INTO ownership (partition, epoch, node, ts_us) VALUES (?, ?, ?, ?)`},
		// The latest owner record of a partition, which an Own supersedes.
		{&w.owner, `SELECT epoch, node, released_us, published_us FROM ownership WHERE partition = ? ORDER BY epoch DESC LIMIT 1`},
		// Release marks the owner record of a partition at its current epoch only.
		{&w.releaseOwner, `UPDATE ownership SET released_us = ?
			WHERE partition = ? AND epoch = ? AND node = ? AND epoch = (SELECT max(epoch) FROM ownership WHERE partition = ?)`},
		// MarkPublished likewise; a mark never lowers the record's.
		{&w.markOwner, `UPDATE ownership SET published_us = max(published_us, ?)
			WHERE partition = ? AND epoch = ? AND node = ? AND epoch = (SELECT max(epoch) FROM ownership WHERE partition = ?)`},
		// SET expressions all see the row as it was before the update. started_us is
		// left out, so that the sessions_by_start index is not rewritten on every
		// append: restart lowers it in the rare case that an earlier event of the
		// session arrives late, and changes no row otherwise; it is not even run for
		// a batch that the writer knows starts no earlier than the row (started).
		{&w.summarize, summarizeQuery},
		// summarize for a batch without task.* events, of a session whose row
		// exists: the columns it sets are in no index, nor in the condition of
		// sessions_running, so that SQLite leaves every index of the table as it
		// is (summarize, which sets status, tasks and ended, rewrites the session's
		// entry in sessions_running).
		{&w.touch, touchQuery},
		// summarize for a batch with task.* events but no task.submitted, of a
		// session whose row exists (a task's end, nearly always): the update alone,
		// without first trying to insert the row.
		{&w.settle, settleQuery},
		// summarize for the first batch of a session (one with a task.submitted,
		// of a session the writer knows no start of): the row alone, if there is
		// none. The row it makes starts at the batch's start, which spares the
		// restart statement. OR IGNORE for the reason insertQuery gives.
		{&w.create, `INSERT OR IGNORE INTO sessions (session_id, status, status_seq, events, steps, last_seq, started_us, updated_us, tasks, ended)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		// The streams due to be pruned, picked alike by each of the three
		// statements of one transaction (which holds the write lock), the summaries
		// last, since they pick them.
		{&w.pruneAliases, `DELETE FROM aliases WHERE id IN (` + dueStreams + `)`},
		{&w.pruneEvents, `DELETE FROM events WHERE session_id IN (` + dueStreams + `)`},
		{&w.pruneSessions, `DELETE FROM sessions WHERE session_id IN (` + dueStreams + `)`},
		{&w.pruneListedAliases, `DELETE FROM aliases WHERE id IN (` + listedDue + `)`},
		{&w.pruneListedEvents, `DELETE FROM events WHERE session_id IN (` + listedDue + `)`},
		{&w.pruneListedSessions, `DELETE FROM sessions WHERE session_id IN (` + listedDue + `)`},
		{&w.lastSeq, `SELECT coalesce(max(seq), 0) FROM events WHERE session_id = ?`},
		{&w.compactAlias, `DELETE FROM aliases WHERE id IN (SELECT id FROM events WHERE session_id = ? AND seq = ?)`},
		{&w.compactEvent, `DELETE FROM events WHERE session_id = ? AND seq = ?`},
		{&w.compactSummary, `UPDATE sessions SET events = events - ? WHERE session_id = ?`},
		{&w.holeAt, `SELECT EXISTS (SELECT 1 FROM events WHERE session_id = ?1 AND seq = ?2),
			EXISTS (SELECT 1 FROM events WHERE session_id = ?1 AND seq > ?2)`},
		// The record of summary rows that lag (lag.go): the highest rowid of the
		// events before them.
		{&w.markLag, `INSERT OR REPLACE INTO summary_lag (id, from_rowid) VALUES (1, (SELECT coalesce(max(rowid), 0) FROM events))`},
		{&w.clearLag, `DELETE FROM summary_lag`},
		// Positional parameters: the driver names a numbered one anew on every call.
		{&w.restart, restartQuery},
		// A session's fold snapshot, in place of the one kept.
		{&w.saveSnapshot, `INSERT OR REPLACE INTO fold_snapshots (session_id, seq, event_id, event_sum, rules, codec, agents, state, sum)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`},
	}...) {
		stmt, err := c.PrepareContext(ctx, s.query)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", s.query, err)
		}
		if _, ok := stmt.(driver.StmtExecContext); !ok {
			return errors.Join(fmt.Errorf("the driver's statements (%T) cannot run with a context", stmt), stmt.Close())
		}
		if _, ok := stmt.(driver.StmtQueryContext); !ok {
			return errors.Join(fmt.Errorf("the driver's statements (%T) cannot run with a context", stmt), stmt.Close())
		}
		*s.stmt = stmt
	}
	return nil
}

func (w *writeStmts) close() error {
	var errs []error
	stmts := []*driver.Stmt{&w.begin, &w.commit, &w.rollback, &w.savepoint, &w.release, &w.undo, &w.insert, &w.byID, &w.byPos, &w.claimed, &w.hasEvents, &w.summarize, &w.touch, &w.settle, &w.create, &w.restart,
		&w.current, &w.maxEpoch, &w.takeOwner, &w.owner, &w.releaseOwner, &w.markOwner, &w.aliased, &w.addAlias, &w.dropProbe, &w.pruneAliases, &w.pruneEvents, &w.pruneSessions,
		&w.lastSeq, &w.compactAlias, &w.compactEvent, &w.compactSummary, &w.holeAt, &w.saveSnapshot, &w.markLag, &w.clearLag,
		&w.pruneListedAliases, &w.pruneListedEvents, &w.pruneListedSessions}
	for i := range w.insertRows {
		stmts = append(stmts, &w.insertRows[i])
	}
	for _, s := range stmts {
		if *s != nil {
			errs = append(errs, (*s).Close())
			*s = nil
		}
	}
	return errors.Join(errs...)
}

// bind sets the arguments of the next statement.
func (w *writeStmts) bind(vals []driver.Value) []driver.NamedValue {
	args := w.args[:len(vals)]
	for i, v := range vals {
		args[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return args
}

// exec runs s with vals and returns the rows it changed.
func (w *writeStmts) exec(ctx context.Context, s driver.Stmt, vals ...driver.Value) (int64, error) {
	res, err := s.(driver.StmtExecContext).ExecContext(ctx, w.bind(vals))
	clear(w.args[:len(vals)])
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// queryRow runs s with vals and returns the columns of its first row (valid until
// the next call), or errNoRows.
func (w *writeStmts) queryRow(ctx context.Context, s driver.Stmt, vals ...driver.Value) (_ []driver.Value, err error) {
	rows, err := s.(driver.StmtQueryContext).QueryContext(ctx, w.bind(vals))
	clear(w.args[:len(vals)])
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := rows.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	row := w.row[:len(rows.Columns())]
	if err := rows.Next(row); err == io.EOF {
		return nil, errNoRows
	} else if err != nil {
		return nil, err
	}
	return row, nil
}

// scan reads the columns of a row queryRow returned into *string and *int64 dests.
func scan(row []driver.Value, dests ...any) error {
	for i, d := range dests {
		var err error
		switch d := d.(type) {
		case *string:
			*d, err = asString(row[i])
		case *int64:
			*d, err = asInt64(row[i])
		default:
			err = fmt.Errorf("cannot scan into %T", d)
		}
		if err != nil {
			return fmt.Errorf("column %d: %w", i, err)
		}
	}
	return nil
}

// asInt64 and asString read a column of a row queryRow returned.
func asInt64(v driver.Value) (int64, error) {
	if n, ok := v.(int64); ok {
		return n, nil
	}
	return 0, fmt.Errorf("column is %T, want an integer", v)
}

func asString(v driver.Value) (string, error) {
	switch s := v.(type) {
	case string:
		return s, nil
	case []byte:
		return string(s), nil
	}
	return "", fmt.Errorf("column is %T, want text", v)
}

// runWriter is the writer goroutine: it takes the requests waiting in the queue,
// as many as one group allows, and commits them together. Group commit needs no
// timer: while one transaction commits, the next callers queue up and form the next
// group. After Close it writes what is still queued, then returns.
func (l *Log) runWriter() {
	defer close(l.writerDone)
	due := time.NewTimer(maxLagAge) // when summary rows that lag are due (lag.go)
	defer due.Stop()
	for {
		var lagDue <-chan time.Time
		if len(l.w.lag) > 0 {
			due.Reset(time.Until(l.w.lagSince.Add(maxLagAge)))
			lagDue = due.C
		}
		select {
		case r := <-l.reqs:
			l.writeGroup(l.gather(r))
		case <-lagDue:
			l.flushLag()
		case <-l.closing:
			for {
				select {
				case r := <-l.reqs:
					l.writeGroup(l.gather(r))
				default:
					l.flushLag() // a Log closed cleanly leaves no rows for the next Open to rebuild
					return
				}
			}
		}
	}
}

// maxYields bounds the times gather lets the other goroutines run before it closes
// a group.
const maxYields = 4

// gather returns first and the requests queued behind it, within the group bounds.
// When the queue is empty it lets the other goroutines run (runtime.Gosched), and
// looks again: callers that are runnable, such as those the last commit just
// answered, queue their next batch and join this group. It yields again as long
// as a yield brought requests, up to maxYields times: under load, the batches of
// many callers then share a commit (its statements, WAL frames and pages), which
// costs less CPU per event than a commit soon after. Cheap when nobody else is
// runnable, and no timer: a lone caller's latency does not grow.
func (l *Log) gather(first *appendReq) []*appendReq {
	group := append(l.group[:0], first)
	defer func() { l.group = group[:0] }()
	events, bytes := len(first.events), reqBytes(first)
	yields, idle := 0, false // idle: nothing was queued since the last yield
	for events < l.cfg.MaxGroupEvents && bytes < maxGroupBytes {
		select {
		case r := <-l.reqs:
			group = append(group, r)
			events += len(r.events)
			bytes += reqBytes(r)
			idle = false
		default:
			if idle || yields == maxYields {
				return group
			}
			yields++
			idle = true
			runtime.Gosched()
		}
	}
	return group
}

// reqBytes is what r writes: its events' payloads, or a snapshot's state (a
// large one fills a group alone, as a large batch does).
func reqBytes(r *appendReq) int {
	if r.snap != nil {
		return len(r.snap.State)
	}
	return messages.PayloadBytes(r.events)
}

// writeGroup writes a group of requests and answers each one. Normally the group is
// one transaction, each request inside its own savepoint: a request whose batch
// conflicts is rolled back to its savepoint and answered ErrSeqConflict while the
// others commit. If the transaction fails as a whole (an I/O error), every request
// is retried alone, so that each caller gets its own batch's outcome; except when
// the database stayed locked (ErrBusy) or the disk is full (eventlog.ErrFull),
// which say nothing about any one batch: every request is answered so at once
// rather than each waiting out the busy timeout, or filling the disk, again.
func (l *Log) writeGroup(group []*appendReq) {
	if l.beforeGroup != nil && (len(group) > 1 || !group[0].flush) { // a flush of summary rows is none of a test's groups
		l.beforeGroup(group)
	}
	live := group[:0]
	for _, r := range group {
		if err := r.ctx.Err(); err != nil {
			r.done <- fmt.Errorf("eventlog/sqlite: append: %w", err) // not written
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	errs, err := l.commit(live)
	if err != nil && len(live) > 1 && !errors.Is(err, ErrBusy) && !errors.Is(err, eventlog.ErrFull) {
		for _, r := range live {
			l.writeGroup([]*appendReq{r})
		}
		return
	}
	l.wrote(err)
	for _, r := range live {
		if r.appends() {
			l.stats.appends.Add(1)
		}
	}
	for i, r := range live {
		switch {
		case err != nil:
			r.done <- err
		case errs == nil:
			r.done <- nil
		default:
			r.done <- errs[i]
		}
	}
}

// commit writes the requests in one transaction, on the driver's connection. It
// returns each request's own outcome (nil or an ErrSeqConflict or ErrFenced; a nil
// slice when every request was written), or an
// error if the transaction failed as a whole, in which case nothing was written.
//
// BEGIN IMMEDIATE takes SQLite's write lock before the transaction reads anything,
// waiting up to BusyTimeout while another connection (another process, with
// Config.Shared) holds it. The transaction then reads the latest commit of every
// process, and holds the lock until COMMIT: the conflict checks of apply, made
// against the database inside it, are final. No seq or ID is cached in memory.
//
// A group is first written without savepoints, as nearly every group is accepted
// whole; if the log refuses one of its requests, the transaction is rolled back and
// the group written again with a savepoint around each request, so that only the
// refused ones are undone.
func (l *Log) commit(reqs []*appendReq) (errs []error, err error) {
	if rerr := l.wconn.Raw(func(any) error {
		errs, err = l.commitGroup(reqs, false)
		if errors.Is(err, errRetryWithSavepoints) {
			errs, err = l.commitGroup(reqs, true)
		}
		return nil
	}); rerr != nil {
		return nil, fmt.Errorf("eventlog/sqlite: append: %w", rerr)
	}
	return errs, err
}

// summarizeQuery is writeStmts.summarize: a delta added to a session's row, made
// if there is none.
const summarizeQuery = `INSERT INTO sessions (session_id, status, status_seq, events, steps, last_seq, started_us, updated_us, tasks, ended)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (session_id) DO UPDATE SET
				status     = CASE WHEN excluded.status_seq > sessions.status_seq THEN excluded.status ELSE sessions.status END,
				status_seq = max(sessions.status_seq, excluded.status_seq),
				events     = sessions.events + excluded.events,
				steps      = sessions.steps + excluded.steps,
				tasks      = sessions.tasks + excluded.tasks,
				ended      = sessions.ended + excluded.ended,
				last_seq   = max(sessions.last_seq, excluded.last_seq),
				updated_us = max(sessions.updated_us, excluded.updated_us)`

// restartQuery is writeStmts.restart: a row's start lowered to an earlier event's.
const restartQuery = `UPDATE sessions SET started_us = ? WHERE session_id = ? AND started_us > ?`

// touchQuery is writeStmts.touch.
const touchQuery = `UPDATE sessions SET events = events + ?, steps = steps + ?, last_seq = max(last_seq, ?),
			updated_us = max(updated_us, ?) WHERE session_id = ?`

// settleQuery is writeStmts.settle: summarize's update, as an UPDATE. Its SET
// expressions, like summarize's, see the row as it was before.
const settleQuery = `UPDATE sessions SET
				status     = CASE WHEN ? > status_seq THEN ? ELSE status END,
				status_seq = max(status_seq, ?),
				events     = events + ?,
				steps      = steps + ?,
				tasks      = tasks + ?,
				ended      = ended + ?,
				last_seq   = max(last_seq, ?),
				updated_us = max(updated_us, ?)
			WHERE session_id = ?`

// errRetryWithSavepoints says a group written without savepoints had a refused
// request: it was rolled back, to be written again with them.
var errRetryWithSavepoints = errors.New("eventlog/sqlite: a request was refused; write the group again with savepoints")

// commitGroup is commit's transaction, with a savepoint around each request or
// without (see commit). The caller holds the driver's connection.
func (l *Log) commitGroup(reqs []*appendReq, savepoints bool) ([]error, error) {
	ctx := context.Background() // the group outlives any one caller's ctx
	clear(l.w.starting)
	l.w.starting = l.w.starting[:0]
	clear(l.w.tailing)
	l.w.tailing = l.w.tailing[:0]
	l.dropRows()
	deferring := l.beginSummaries(reqs)
	if l.cfg.Shared {
		clear(l.w.epochs) // another process may have taken partitions since
	}
	if _, err := l.w.exec(ctx, l.w.begin); err != nil {
		return nil, l.fullErr(l.busyErr(fmt.Errorf("eventlog/sqlite: append: begin: %w", err)))
	}
	rollback := func() error {
		clear(l.w.epochs) // they may be what a rolled back Own wrote
		l.dropRows()
		if _, err := l.w.exec(ctx, l.w.rollback); err != nil && !noTransaction(err) {
			return fmt.Errorf("rollback: %w", err)
		}
		return nil
	}
	// again rolls the transaction back, to write the group again with savepoints.
	again := func() ([]error, error) {
		if rerr := rollback(); rerr != nil {
			return nil, fmt.Errorf("eventlog/sqlite: append: %w", rerr)
		}
		return nil, errRetryWithSavepoints
	}
	abort := func(err error) ([]error, error) {
		err = l.fullErr(l.busyErr(err))
		if rerr := rollback(); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return nil, err
	}
	if l.cfg.Shared || !l.w.aliasesRead {
		row, err := l.w.queryRow(ctx, l.w.aliased)
		var aliases int64
		if err == nil {
			aliases, err = asInt64(row[0])
		}
		if err != nil {
			return abort(fmt.Errorf("eventlog/sqlite: append: look up aliases: %w", err))
		}
		l.w.aliases, l.w.aliasesRead = aliases != 0, true
	}
	if deferring {
		if err := l.markSummaries(ctx); err != nil {
			return abort(err)
		}
	}
	var (
		errs    []error
		written uint64
	)
	for i, r := range reqs {
		if !r.appends() {
			// A request that appends nothing reads or deletes summary rows (a prune,
			// a compaction), or comes seldom: the rows that lag and those of the
			// requests before it are written first, outside its savepoint.
			err := l.flushRows(ctx) // a prune deletes rows; none of them looks up events, but none is an append either
			if err == nil {
				err = l.summarizeNow(ctx)
			}
			if errors.Is(err, errInsertedFewer) {
				return again()
			} else if err != nil {
				return abort(err)
			}
		}
		if savepoints {
			if _, err := l.w.exec(ctx, l.w.savepoint); err != nil {
				return abort(fmt.Errorf("eventlog/sqlite: append: savepoint: %w", err))
			}
		}
		var (
			n   uint64
			err error
		)
		// A request undone takes its starts, tails and summary deltas with it.
		starts, tails, deltas := len(l.w.starting), len(l.w.tailing), len(l.w.txDeltas)
		switch {
		case r.flush:
		case r.probe:
			err = l.probeWrite(ctx)
		case r.own != nil:
			err = l.takeOwnership(ctx, r.own)
		case r.free != nil:
			err = l.releaseOwnership(ctx, r.free)
		case r.prune != nil:
			err = l.pruneStreams(ctx, r.prune)
		case r.compact != nil:
			err = l.deleteEvents(ctx, r.compact)
		case r.snap != nil:
			err = l.saveSnapshot(ctx, r.snap)
		default:
			n, err = l.applyReq(ctx, r, !savepoints)
		}
		if errors.Is(err, errInsertedFewer) {
			return again()
		}
		refused := errors.Is(err, eventlog.ErrSeqConflict) || errors.Is(err, eventlog.ErrFenced)
		switch {
		case refused && len(reqs) == 1:
			if rerr := rollback(); rerr != nil {
				return nil, fmt.Errorf("eventlog/sqlite: append: %w", rerr)
			}
			return []error{err}, nil
		case refused && !savepoints:
			return again()
		case refused:
			if errs == nil {
				errs = make([]error, len(reqs))
			}
			errs[i] = err
			l.w.starting = l.w.starting[:starts]
			l.w.tailing = l.w.tailing[:tails]
			clear(l.w.txDeltas[deltas:])
			l.w.txDeltas = l.w.txDeltas[:deltas]
			if _, err := l.w.exec(ctx, l.w.undo); err != nil {
				return abort(fmt.Errorf("eventlog/sqlite: append: rollback to savepoint: %w", err))
			}
		case err != nil:
			return abort(err)
		default:
			written += n
		}
		if savepoints {
			if _, err := l.w.exec(ctx, l.w.release); err != nil {
				return abort(fmt.Errorf("eventlog/sqlite: append: release savepoint: %w", err))
			}
		}
	}
	if err := l.flushRows(ctx); errors.Is(err, errInsertedFewer) {
		return again()
	} else if err != nil {
		return abort(err)
	}
	if !deferring {
		if err := l.summarizeNow(ctx); err != nil {
			return abort(err)
		}
	}
	if _, err := l.w.exec(ctx, l.w.commit); err != nil {
		return abort(fmt.Errorf("eventlog/sqlite: append: commit: %w", err))
	}
	l.keepSummaries(deferring)
	l.w.keepStarts()
	l.w.keepTails()
	if len(reqs) > 1 || !reqs[0].flush { // a flush of summary rows alone is no group of calls
		l.stats.transactions.Add(1)
	}
	l.stats.events.Add(written)
	bytes := 0
	for _, r := range reqs {
		bytes += messages.PayloadBytes(r.events)
	}
	l.committed(bytes)
	return errs, nil
}

// sessionDelta is what one batch adds to a session's summary row.
type sessionDelta struct {
	id                   string
	status               string
	statusSeq            uint64
	events, steps        int
	tasks, ended         int // task.submitted; task.completed and task.failed
	lastSeq              uint64
	startedUS, updatedUS int64
}

// takeOwnership records o.node as the owner of o.partitions under the next epoch
// (one above the highest recorded, of any partition), inside the writer's
// transaction, and sets o.previous to the owner records it supersedes, read in
// that transaction.
func (l *Log) takeOwnership(ctx context.Context, o *ownReq) error {
	row, err := l.w.queryRow(ctx, l.w.maxEpoch)
	var top int64
	if err == nil {
		top, err = asInt64(row[0])
	}
	if err != nil {
		return fmt.Errorf("eventlog/sqlite: own: read epochs: %w", err)
	}
	// A transaction written again (errRetryWithSavepoints) reads them again.
	o.previous = make(map[int]eventlog.Ownership, len(o.partitions))
	for _, p := range o.partitions {
		row, err := l.w.queryRow(ctx, l.w.owner, int64(p))
		if errors.Is(err, errNoRows) {
			continue // nobody owned it
		}
		var (
			prev            eventlog.Ownership
			epoch, released int64
			published       int64
		)
		if err == nil {
			err = scan(row, &epoch, &prev.Node, &released, &published)
		}
		if err != nil {
			return fmt.Errorf("eventlog/sqlite: own: read the owner of partition %d: %w", p, err)
		}
		prev.Epoch, prev.ReleasedUS, prev.PublishedUS = uint64(epoch), released, published
		o.previous[p] = prev
	}
	epoch, now := top+1, time.Now().UnixMicro()
	clear(l.w.epochs) // this transaction's epochs are the ones being taken now
	for _, p := range o.partitions {
		if _, err := l.w.exec(ctx, l.w.takeOwner, int64(p), epoch, o.node, now); err != nil {
			return fmt.Errorf("eventlog/sqlite: own partition %d for node %s: %w", p, o.node, err)
		}
	}
	o.epoch = uint64(epoch)
	return nil
}

// releaseOwnership marks o.node's owner records of o.partitions at o.epoch
// released, where o.epoch is still the partition's current epoch, inside the
// writer's transaction.
// A mark (o.mark) raises their published_us to o.atUS instead.
func (l *Log) releaseOwnership(ctx context.Context, o *releaseReq) error {
	stmt, what := l.w.releaseOwner, "release"
	if o.mark {
		stmt, what = l.w.markOwner, "mark published"
	}
	for _, p := range o.partitions {
		if _, err := l.w.exec(ctx, stmt, o.atUS, int64(p), int64(o.epoch), o.node, int64(p)); err != nil {
			return fmt.Errorf("eventlog/sqlite: %s partition %d for node %s at epoch %d: %w", what, p, o.node, o.epoch, err)
		}
	}
	return nil
}

// fence returns an error wrapping ErrFenced unless lease is its partition's
// current epoch, read inside the writer's transaction (or known from an earlier
// one: see writeStmts.epochs).
func (l *Log) fence(ctx context.Context, lease eventlog.Lease) error {
	current, ok := l.w.epochs[lease.Partition]
	if !ok {
		row, err := l.w.queryRow(ctx, l.w.current, int64(lease.Partition))
		if err == nil {
			current, err = asInt64(row[0])
		}
		if err != nil {
			return fmt.Errorf("eventlog/sqlite: append under %s: read the current epoch: %w", lease, err)
		}
		if l.w.epochs == nil {
			l.w.epochs = map[int]int64{}
		}
		l.w.epochs[lease.Partition] = current
	}
	if uint64(current) != lease.Epoch {
		return fmt.Errorf("%w: append under %s refused: the partition's current epoch is %d", eventlog.ErrFenced, lease, current)
	}
	return nil
}

// apply inserts a batch's events and updates the summaries of their sessions. It
// returns the number of events written, or an error wrapping ErrSeqConflict if the
// batch conflicts with stored events, or ErrFenced if lease is not current, or an
// error of the database (which wraps neither). The caller undoes the batch on error.
//
// With rows, a batch of several events adds their rows to those of the group's
// batches before it (pendRow), inserted up to maxInsertRows in one statement, which
// fails with errInsertedFewer if it could not insert them all; the caller then rolls
// back and writes the group again without rows, an event at a time.
func (l *Log) apply(ctx context.Context, lease *eventlog.Lease, events []messages.Envelope, rows bool) (uint64, error) {
	var (
		first   = len(l.w.txDeltas) // this batch's deltas are l.w.txDeltas[first:]; batches rarely span more than one session
		written uint64
		epoch   uint64
	)
	if lease != nil {
		if err := l.fence(ctx, *lease); err != nil {
			return 0, err
		}
		epoch = lease.Epoch
	}
	chunked := 0 // events[:chunked] are inserted by the group's statements of several rows
	// prevIn: the batch's event before the one at hand was inserted (by the batch).
	prevIn := false
	follows := func(i int) bool { // events[i] follows events[i-1] in its session
		return i > 0 && events[i-1].SessionID == events[i].SessionID && events[i-1].Seq+1 == events[i].Seq
	}
	for _, e := range events {
		if eventlog.Compactable(e.SessionID) {
			if err := l.checkHole(ctx, e); err != nil {
				return 0, err
			}
		}
	}
	if rows && len(events) > 1 {
		// No two events of a batch share an ID (CheckBatch): each is checked
		// against the stored ones alone (a lookup first inserts the rows pending).
		aliases := false
		for _, e := range events {
			alias, err := l.checkID(ctx, e)
			if err != nil {
				return 0, err
			}
			aliases = aliases || alias
		}
		for i, e := range events {
			// Every event is inserted, or the group is written again without rows
			// (errInsertedFewer): the event before, of the same batch, is in.
			if err := l.pendRow(ctx, e, epoch, l.w.epochStart(e, epoch, follows(i))); err != nil {
				return 0, err
			}
			if aliases && isAlias(e) {
				if err := l.addAlias(ctx, e); err != nil {
					return 0, err
				}
			}
			if epoch > 0 {
				l.w.tailing = append(l.w.tailing, sessionTail{e.SessionID, e.Seq, epoch})
			}
		}
		chunked = len(events)
	}
	for i, e := range events {
		if i >= chunked {
			alias, err := l.checkID(ctx, e)
			if err != nil {
				return 0, err
			}
			l.w.pack = l.w.pack[:0]
			vals := l.w.rowValues(l.w.vals[:0], &l.w.pack, e, epoch, l.w.epochStart(e, epoch, follows(i) && prevIn))
			n, err := l.w.exec(ctx, l.w.insert, vals...)
			clear(vals)
			if cap(l.w.pack) > maxPackBuffer {
				l.w.pack = nil
			}
			if err != nil {
				return 0, fmt.Errorf("eventlog/sqlite: append event %s (session %s seq %d): %w", e.ID, e.SessionID, e.Seq, err)
			}
			prevIn = n != 0
			if n == 0 {
				if err := l.classify(ctx, lease, e); err != nil {
					return 0, err
				}
				continue // stored before, at the same position: at-least-once delivery
			}
			if epoch > 0 {
				l.w.tailing = append(l.w.tailing, sessionTail{e.SessionID, e.Seq, epoch})
			}
			if alias {
				if err := l.addAlias(ctx, e); err != nil {
					return 0, err
				}
			}
		}
		written++
		i := first
		for i < len(l.w.txDeltas) && l.w.txDeltas[i].id != e.SessionID {
			i++
		}
		if i == len(l.w.txDeltas) {
			l.w.txDeltas = append(l.w.txDeltas, newDelta(e.SessionID, e.TS))
		}
		l.w.txDeltas[i].add(e.Type, e.Seq, e.TS)
	}
	return written, nil
}

// newDelta is the delta of no event to session id's summary, at ts.
func newDelta(id string, ts int64) sessionDelta {
	return sessionDelta{id: id, status: messages.StatusRunning, startedUS: ts, updatedUS: ts}
}

// add adds an event, of type typ at seq stamped ts, to d.
func (d *sessionDelta) add(typ messages.Type, seq uint64, ts int64) {
	d.events++
	switch typ {
	case messages.TypeModelRequested:
		d.steps++
	case messages.TypeTaskSubmitted:
		d.tasks++
	case messages.TypeTaskCompleted, messages.TypeTaskFailed:
		d.ended++
	}
	if status, ok := eventlog.TaskStatus(typ); ok && seq > d.statusSeq {
		d.status, d.statusSeq = status, seq
	}
	d.lastSeq = max(d.lastSeq, seq)
	d.startedUS = min(d.startedUS, ts)
	d.updatedUS = max(d.updatedUS, ts)
}

// merge adds o, a delta of the same session, to d.
func (d *sessionDelta) merge(o sessionDelta) {
	d.events += o.events
	d.steps += o.steps
	d.tasks += o.tasks
	d.ended += o.ended
	if o.statusSeq > d.statusSeq {
		d.status, d.statusSeq = o.status, o.statusSeq
	}
	d.lastSeq = max(d.lastSeq, o.lastSeq)
	d.startedUS = min(d.startedUS, o.startedUS)
	d.updatedUS = max(d.updatedUS, o.updatedUS)
}

// summarize writes deltas to the summary table, in the writer's transaction: a
// statement or two per session (deltas name each session once).
func (l *Log) summarize(ctx context.Context, deltas []sessionDelta) error {
	for _, d := range deltas {
		id, started := l.w.session.of(d.id), l.w.stamp(d.startedUS)
		var touched int64
		fresh := false // the row was made by create: it starts at d.startedUS
		switch {
		case d.statusSeq == 0 && d.tasks == 0 && d.ended == 0:
			// No task.* event: summarize would leave status, status_seq, tasks and
			// ended as they are, in a row that exists.
			var err error
			touched, err = l.w.exec(ctx, l.w.touch, int64(d.events), int64(d.steps), int64(d.lastSeq), l.w.stamp(d.updatedUS), id)
			if err != nil {
				return fmt.Errorf("eventlog/sqlite: append: update summary of session %s: %w", d.id, err)
			}
		case d.tasks == 0:
			// No task.submitted, which a new session's first batch has: the row
			// most likely exists.
			var err error
			touched, err = l.w.exec(ctx, l.w.settle, int64(d.statusSeq), l.w.name(d.status), int64(d.statusSeq), int64(d.events), int64(d.steps),
				int64(d.tasks), int64(d.ended), int64(d.lastSeq), l.w.stamp(d.updatedUS), id)
			if err != nil {
				return fmt.Errorf("eventlog/sqlite: append: update summary of session %s: %w", d.id, err)
			}
		case !l.w.startedBy(d.id, d.startedUS):
			// A task.submitted, of a session the writer knows no start of: a new
			// session's first batch, most likely.
			var err error
			touched, err = l.w.exec(ctx, l.w.create, id, l.w.name(d.status), int64(d.statusSeq), int64(d.events), int64(d.steps),
				int64(d.lastSeq), started, l.w.stamp(d.updatedUS), int64(d.tasks), int64(d.ended))
			if err != nil {
				return fmt.Errorf("eventlog/sqlite: append: summary of session %s: %w", d.id, err)
			}
			fresh = touched != 0
		}
		if touched == 0 {
			if _, err := l.w.exec(ctx, l.w.summarize, id, l.w.name(d.status), int64(d.statusSeq), int64(d.events), int64(d.steps),
				int64(d.lastSeq), started, l.w.stamp(d.updatedUS), int64(d.tasks), int64(d.ended)); err != nil {
				return fmt.Errorf("eventlog/sqlite: append: update summary of session %s: %w", d.id, err)
			}
		}
		// After these statements the row starts at or before d.startedUS; the restart
		// is needed only if it may have started later (not a row create just made).
		if !fresh && !l.w.startedBy(d.id, d.startedUS) {
			if _, err := l.w.exec(ctx, l.w.restart, started, id, started); err != nil {
				return fmt.Errorf("eventlog/sqlite: append: update start of session %s: %w", d.id, err)
			}
		}
		l.w.starting = append(l.w.starting, sessionStart{d.id, d.startedUS})
	}
	return nil
}

// pendingKey is the key of an event whose row is pending (writeStmts.pend).
type pendingKey struct {
	id, session string
	seq         uint64
}

// pendRow adds e's row to the rows pending in the group, and inserts them when
// they fill a statement. The rows of the batches of a group go in together, so
// that a statement writes the rows of several batches: every row must be
// inserted, or the insert fails with errInsertedFewer and the group is written
// again with a savepoint per batch, an event at a time, which finds the batch
// refused. Until they are inserted, nothing may look up stored events that the
// pending rows could be (flushRows).
func (l *Log) pendRow(ctx context.Context, e messages.Envelope, epoch uint64, start driver.Value) error {
	n := len(l.w.pendKeys)
	l.w.rowValues(l.w.pend[n*insertColumns:n*insertColumns], &l.w.pendPack, e, epoch, start)
	l.w.pendKeys = append(l.w.pendKeys, pendingKey{e.ID, e.SessionID, e.Seq})
	if n+1 < maxInsertRows {
		return nil
	}
	return l.flushRows(ctx)
}

// flushRows inserts the rows pending, if any, in one statement.
func (l *Log) flushRows(ctx context.Context) error {
	k := len(l.w.pendKeys)
	if k == 0 {
		return nil
	}
	stmt := l.w.insert
	if k > 1 {
		stmt = l.w.insertRows[k-2]
	}
	first, last := l.w.pendKeys[0], l.w.pendKeys[k-1]
	vals := l.w.pend[:k*insertColumns]
	n, err := l.w.exec(ctx, stmt, vals...)
	l.dropRows()
	if err != nil {
		return fmt.Errorf("eventlog/sqlite: append events %s (session %s seq %d) to %s (session %s seq %d): %w",
			first.id, first.session, first.seq, last.id, last.session, last.seq, err)
	}
	if n != int64(k) {
		return errInsertedFewer
	}
	return nil
}

// dropRows forgets the rows pending.
func (l *Log) dropRows() {
	clear(l.w.pend[:len(l.w.pendKeys)*insertColumns])
	clear(l.w.pendKeys)
	l.w.pendKeys = l.w.pendKeys[:0]
	l.w.pendPack = l.w.pendPack[:0] // no value refers to it now
	if cap(l.w.pendPack) > maxPackBuffer {
		l.w.pendPack = nil
	}
}

// pendingIn reports whether a row of session is pending.
func (w *writeStmts) pendingIn(session string) bool {
	for _, k := range w.pendKeys {
		if k.session == session {
			return true
		}
	}
	return false
}

// applyReq applies an append request: apply, after checking that a claim's
// session has no events. The check runs in the writer's transaction, which holds
// SQLite's write lock: no event of the session can be written between it and the
// insert, by this process or another sharing the log, and a claim earlier in the
// same transaction (one of the group) is seen.
func (l *Log) applyReq(ctx context.Context, r *appendReq, rows bool) (uint64, error) {
	if !r.claim {
		return l.apply(ctx, r.lease, r.events, rows)
	}
	if r.lease != nil {
		if err := l.fence(ctx, *r.lease); err != nil {
			return 0, err
		}
	}
	e := r.events[0]
	if l.w.pendingIn(e.SessionID) { // the lookup must see them
		if err := l.flushRows(ctx); err != nil {
			return 0, err
		}
	}
	id := l.w.session.of(e.SessionID)
	var has, epoch int64
	var row []driver.Value
	var err error
	if r.lease != nil {
		if row, err = l.w.queryRow(ctx, l.w.claimed, id, id); err == nil {
			err = scan(row, &has, &epoch)
		}
	} else if row, err = l.w.queryRow(ctx, l.w.hasEvents, id); err == nil {
		err = scan(row, &has) // epoch is of no use without a lease
	}
	if err != nil {
		return 0, fmt.Errorf("eventlog/sqlite: claim session %s: look up its events: %w", e.SessionID, err)
	}
	if has != 0 {
		if r.lease != nil && uint64(epoch) > r.lease.Epoch {
			return 0, fmt.Errorf("%w: claim of session %s under %s refused: it holds events of epoch %d", eventlog.ErrFenced, e.SessionID, r.lease, epoch)
		}
		return 0, fmt.Errorf("%w: claim of session %s (event %s at seq %d) refused: the session has events", eventlog.ErrSeqConflict, e.SessionID, e.ID, e.Seq)
	}
	return l.apply(ctx, r.lease, r.events, rows)
}

// rowValues appends the values of e's row to vals, as insertQuery binds them: its
// pack (its session ID, ID, type, causation ID, correlation ID and actor, then its
// payload unless that is over maxPackedPayload, appended to *pack), its payload
// if not packed or else where the actor ends in the pack, seq, version, ts, epoch,
// epoch_start, then the ends of the first five texts in the pack. The pack is valid
// until *pack is refilled.
func (w *writeStmts) rowValues(vals []driver.Value, pack *[]byte, e messages.Envelope, epoch uint64, start driver.Value) []driver.Value {
	b := *pack
	from := len(b)
	var ends [5]int64
	for j, s := range [5]string{e.SessionID, e.ID, string(e.Type), e.CausationID, e.CorrelationID} {
		b = append(b, s...)
		ends[j] = int64(len(b) - from)
	}
	b = append(b, e.Actor...)
	var payload driver.Value // made in one branch only: a slice made a driver.Value is copied to the heap
	if len(e.Payload) <= maxPackedPayload {
		payload = int64(len(b) - from)
		b = append(b, e.Payload...)
	} else {
		payload = []byte(e.Payload)
	}
	*pack = b
	return append(vals, b[from:len(b):len(b)], payload, int64(e.Seq), int64(e.Version), w.stamp(e.TS), int64(epoch), start,
		ends[0], ends[1], ends[2], ends[3], ends[4])
}

// The values of column epoch_start, made once.
var (
	startsRun    driver.Value = int64(1)
	continuesRun driver.Value = int64(0)
)

// epochStart returns the epoch_start of e, appended under epoch: 0 (continuesRun)
// only if the event before it, at e.Seq-1, is stored for good with the same
// epoch, as the writer knows for sure: inserted by the same batch (prevInBatch:
// the batch's event before e is that event, and was inserted by it, so under the
// same epoch; if e's row is written, so is that one), or committed by an earlier
// transaction (writeStmts.tails). A stored row never changes, nor goes: but a
// prunable stream's, whose tails are not kept (prunable).
func (w *writeStmts) epochStart(e messages.Envelope, epoch uint64, prevInBatch bool) driver.Value {
	if epoch == 0 {
		return startsRun // never in the index: as the column's default
	}
	if prevInBatch {
		return continuesRun
	}
	if t, ok := w.tails[e.SessionID]; ok && t.seq+1 == e.Seq && t.epoch == epoch {
		return continuesRun
	}
	return startsRun
}

// sessionTail is a leased event a transaction of the writer inserted: its
// session, seq and epoch.
type sessionTail struct {
	session    string
	seq, epoch uint64
}

// maxTails bounds writeStmts.tails: past it, the map is emptied.
const maxTails = 4096

// keepTails records the leased events of a transaction that committed.
func (w *writeStmts) keepTails() {
	if len(w.tailing) == 0 {
		return
	}
	if w.tails == nil || len(w.tails)+len(w.tailing) > maxTails {
		w.tails = make(map[string]sessionTail, min(maxTails, 64))
	}
	for _, t := range w.tailing {
		if prunable(t.session) {
			continue
		}
		if old, ok := w.tails[t.session]; !ok || t.seq > old.seq {
			w.tails[t.session] = t
		}
	}
	clear(w.tailing)
	w.tailing = w.tailing[:0]
}

// classify explains why e was not inserted: it is already stored at its position
// (nil), or it conflicts with a stored event (an error wrapping ErrSeqConflict), or
// an event of a later epoch than lease's holds its position (ErrFenced), or the
// database failed.
//
// The write transaction checked lease first, and holds the write lock, so no event
// of a stale owner is stored here: a stored event of a lower epoch at e's position
// was written before lease was taken, and the holder of lease read it.
func (l *Log) classify(ctx context.Context, lease *eventlog.Lease, e messages.Envelope) error {
	if err := l.flushRows(ctx); err != nil { // the lookups must see them
		return err
	}
	session, seq, epoch, err := l.storedAt(ctx, e.ID)
	switch {
	case err == nil && session == e.SessionID && uint64(seq) == e.Seq && lease != nil && uint64(epoch) > lease.Epoch:
		return fmt.Errorf("%w: session %s seq %d holds event %s of epoch %d, appended under %s",
			eventlog.ErrFenced, e.SessionID, e.Seq, e.ID, epoch, lease)
	case err == nil && session == e.SessionID && uint64(seq) == e.Seq:
		return nil
	case err == nil:
		return fmt.Errorf("%w: event %s is stored at session %s seq %d, appended at session %s seq %d",
			eventlog.ErrSeqConflict, e.ID, session, seq, e.SessionID, e.Seq)
	case !errors.Is(err, errNoRows):
		return fmt.Errorf("eventlog/sqlite: append event %s: look up id: %w", e.ID, err)
	}
	var holder string
	row, err := l.w.queryRow(ctx, l.w.byPos, e.SessionID, int64(e.Seq))
	if err == nil {
		err = scan(row, &holder, &epoch)
	}
	if err != nil {
		return fmt.Errorf("eventlog/sqlite: append event %s (session %s seq %d): insert ignored but neither key is taken: %w",
			e.ID, e.SessionID, e.Seq, err)
	}
	if lease != nil && uint64(epoch) > lease.Epoch {
		return fmt.Errorf("%w: session %s seq %d holds event %s of epoch %d, appended %s under %s",
			eventlog.ErrFenced, e.SessionID, e.Seq, holder, epoch, e.ID, lease)
	}
	return fmt.Errorf("%w: session %s seq %d holds event %s, appended %s",
		eventlog.ErrSeqConflict, e.SessionID, e.Seq, holder, e.ID)
}

// storedAt returns the position and epoch of the stored event whose ID is id, or
// errNoRows. An event whose ID is not derived from its position is found by its
// ID (index events_by_id); one whose ID is derived, at the position that id
// derives from, if any.
func (l *Log) storedAt(ctx context.Context, id string) (session string, seq, epoch int64, err error) {
	row, err := l.w.queryRow(ctx, l.w.byID, id)
	if err == nil {
		err = scan(row, &session, &seq, &epoch)
	}
	if !errors.Is(err, errNoRows) {
		return session, seq, epoch, err
	}
	s, q, ok := positionOf(id)
	if !ok {
		return "", 0, 0, errNoRows
	}
	var holder string
	row, err = l.w.queryRow(ctx, l.w.byPos, s, int64(q))
	if err == nil {
		err = scan(row, &holder, &epoch)
	}
	switch {
	case err != nil:
		return "", 0, 0, err
	case holder != id:
		return "", 0, 0, errNoRows
	}
	return s, int64(q), epoch, nil
}

// checkID looks, before e is inserted, for a stored event with e's ID that the
// insert would not see: the event at the position e's ID derives from, if e is
// not at that position (e aliases it: checkID reports it); or, if e is at it, an
// event elsewhere with e's ID, when table aliases may hold one (writeStmts.aliases).
// Either is a conflict, as the insert's constraints answer every other one.
func (l *Log) checkID(ctx context.Context, e messages.Envelope) (alias bool, err error) {
	derived := derivedID(e.ID, e.SessionID, e.Seq)
	if derived && !l.w.aliases {
		return false, nil // the common case, without a lookup
	}
	if !derived {
		if _, _, ok := positionOf(e.ID); !ok {
			return false, nil
		}
	}
	return l.lookUpID(ctx, e, derived)
}

// lookUpID is checkID's lookup.
func (l *Log) lookUpID(ctx context.Context, e messages.Envelope, derived bool) (alias bool, err error) {
	if err := l.flushRows(ctx); err != nil { // the lookup must see them
		return false, err
	}
	var (
		session    string
		seq, epoch int64
	)
	if derived {
		row, err := l.w.queryRow(ctx, l.w.byID, e.ID)
		if err == nil {
			err = scan(row, &session, &seq, &epoch)
		}
		switch {
		case errors.Is(err, errNoRows):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("eventlog/sqlite: append event %s: look up id: %w", e.ID, err)
		}
	} else {
		s, q, _ := positionOf(e.ID)
		var holder string
		row, err := l.w.queryRow(ctx, l.w.byPos, s, int64(q))
		if err == nil {
			err = scan(row, &holder, &epoch)
		}
		switch {
		case errors.Is(err, errNoRows) || err == nil && holder != e.ID:
			return true, nil
		case err != nil:
			return false, fmt.Errorf("eventlog/sqlite: append event %s: look up id: %w", e.ID, err)
		}
		session, seq = s, int64(q)
	}
	return false, fmt.Errorf("%w: event %s is stored at session %s seq %d, appended at session %s seq %d",
		eventlog.ErrSeqConflict, e.ID, session, seq, e.SessionID, e.Seq)
}

// addAlias records in table aliases the ID of e, just inserted, which is derived
// from another position than e's.
func (l *Log) addAlias(ctx context.Context, e messages.Envelope) error {
	if _, err := l.w.exec(ctx, l.w.addAlias, e.ID); err != nil {
		return fmt.Errorf("eventlog/sqlite: append event %s (session %s seq %d): record it in aliases: %w", e.ID, e.SessionID, e.Seq, err)
	}
	l.w.aliases = true
	return nil
}

// derivedID reports whether id is the ID derived from the position (session,
// seq): "<session>/<seq>", as derivedWhere says.
func derivedID(id, session string, seq uint64) bool {
	n := len(session)
	if len(id) < n+2 || id[n] != '/' || id[:n] != session {
		return false
	}
	var b [20]byte
	return id[n+1:] == string(strconv.AppendUint(b[:0], seq, 10))
}

// positionOf returns the position whose derived ID id is, if any: the session
// before the last '/', and a seq that SQLite stores after it (1 to 2^63-1, in
// canonical decimal). No two positions derive the same ID.
func positionOf(id string) (session string, seq uint64, ok bool) {
	i := strings.LastIndexByte(id, '/')
	if i <= 0 || i == len(id)-1 || id[i+1] == '0' {
		return "", 0, false
	}
	for _, c := range id[i+1:] {
		if c < '0' || c > '9' {
			return "", 0, false
		}
	}
	seq, err := strconv.ParseUint(id[i+1:], 10, 63)
	if err != nil {
		return "", 0, false
	}
	return id[:i], seq, true
}

// isAlias reports whether e's ID is derived from another position than e's.
func isAlias(e messages.Envelope) bool {
	if derivedID(e.ID, e.SessionID, e.Seq) {
		return false
	}
	_, _, ok := positionOf(e.ID)
	return ok
}
