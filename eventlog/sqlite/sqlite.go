package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// Files in the data directory.
const (
	dbFile   = "events.db"
	lockFile = "LOCK"
)

// Log is the embedded event log: one SQLite database in WAL mode, written by a single
// writer goroutine that commits concurrent Append calls together, and read through a
// pool of read connections. It is safe for concurrent use, and with Config.Shared
// several processes may each hold a Log of the same directory.
type Log struct {
	cfg  Config
	path string
	lock *os.File

	wdb       *sql.DB   // two connections: the writer's and the checkpointer's
	wconn     *sql.Conn // owned by the writer goroutine
	w         writeStmts
	lagging   atomic.Bool // summary rows lag their events (lag.go): the writer sets it after each commit
	ckconn    *sql.Conn   // owned by the checkpointer goroutine
	rdb       *sql.DB     // read pool
	read      *sql.Stmt
	readEpoch *sql.Stmt // the highest epoch of a session before a seq
	list      *sql.Stmt
	// listRunning is list for the running sessions only (listRunningQuery).
	listRunning *sql.Stmt

	reqs       chan *appendReq
	group      []*appendReq             // the writer's, reused by gather
	reqPool    sync.Pool                // of *appendReq, with their done channel
	closing    chan struct{}            // closed by Close
	writerDone chan struct{}            // closed when the writer goroutine returns
	ckWanted   chan struct{}            // the writer asks for a checkpoint (capacity 1)
	ckDone     chan struct{}            // closed when the checkpointer goroutine returns
	sinceCk    struct{ txs, bytes int } // writer-owned: work since the last ask
	closeOnce  sync.Once
	closeErr   error

	stats struct{ appends, transactions, events atomic.Uint64 }

	// failing is why the writer's last transaction failed, nil when it committed
	// (Writable); probes paces its probe writes.
	failing atomic.Pointer[writeFailure]
	probes  eventlog.Probes

	// beforeGroup, set by tests only, runs in the writer before each group is written.
	beforeGroup func(group []*appendReq)
}

var (
	_ eventlog.Log     = (*Log)(nil)
	_ eventlog.Fencing = (*Log)(nil)
	_ eventlog.Health  = (*Log)(nil)
)

// Open opens (creating if needed) the event log in cfg.Dir. It takes the directory's
// lock first: if another Log holds it, in this process or another, Open fails with an
// error wrapping eventlog.ErrLocked. With cfg.Shared the lock is a shared one, which
// other Logs opened with Shared may hold at the same time (see Config.Shared). Open
// then brings the schema to SchemaVersion.
//
// With cfg.ReadOnly, Open instead opens an existing log for reading only, beside the
// node that may hold it: see Config.ReadOnly.
func Open(ctx context.Context, cfg Config) (*Log, error) {
	return open(ctx, cfg, nil)
}

func open(ctx context.Context, cfg Config, beforeGroup func([]*appendReq)) (_ *Log, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if cfg.ReadOnly {
		return openReadOnly(ctx, cfg)
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: data directory %s: %w", cfg.Dir, err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: create data directory: %w", err)
	}
	// Before the lock file and the first pragma: a directory whose events.db is
	// another program's (or no database) is refused with nothing changed in it.
	if err := checkLogFile(ctx, filepath.Join(dir, dbFile)); err != nil {
		return nil, err
	}
	l := &Log{
		cfg:         cfg,
		path:        filepath.Join(dir, dbFile),
		reqs:        make(chan *appendReq, cfg.QueueSize),
		closing:     make(chan struct{}),
		writerDone:  make(chan struct{}),
		ckWanted:    make(chan struct{}, 1),
		ckDone:      make(chan struct{}),
		beforeGroup: beforeGroup,
		probes:      eventlog.Probes{Every: probeInterval},
	}
	l.reqPool.New = func() any { return &appendReq{done: make(chan error, 1)} }
	// Whether this process opens the log alone: an exclusive opener does; a shared
	// one when nobody held the directory just before (see olderBuildSteps).
	alone := !cfg.Shared || !lockHeld(dir)
	if l.lock, err = lockDir(ctx, dir, cfg.Shared, cfg.LockWait, cfg.Logger); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if noSpace(dir) && !errors.Is(err, eventlog.ErrFull) {
				// SQLite says "disk I/O error" when it cannot size its shared
				// memory file, which names no cause.
				err = fmt.Errorf("%w: the filesystem of %s has no space left: %w", eventlog.ErrFull, dir, err)
			}
			err = errors.Join(err, l.release())
		}
	}()

	synchronous := "NORMAL"
	if cfg.SyncFull {
		synchronous = "FULL"
	}
	busy := fmt.Sprintf("busy_timeout(%d)", cfg.BusyTimeout.Milliseconds())
	if l.wdb, err = sql.Open("sqlite", dsn(l.path, busy, "journal_mode(WAL)", "synchronous("+synchronous+")",
		fmt.Sprintf("wal_autocheckpoint(%d)", backstopCheckpointPages), fmt.Sprintf("journal_size_limit(%d)", walSizeLimit))); err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: open %s: %w", l.path, err)
	}
	l.wdb.SetMaxOpenConns(2)
	l.wdb.SetMaxIdleConns(2)
	l.wdb.SetConnMaxLifetime(0)
	l.wdb.SetConnMaxIdleTime(0)
	if l.wconn, err = l.firstConn(ctx); err != nil { // sets the pragmas, WAL mode first of all
		return nil, l.busyErr(fmt.Errorf("eventlog/sqlite: open %s: %w", l.path, err))
	}
	var mode string
	if err := l.wconn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: %s: read journal mode: %w", l.path, err)
	}
	if mode != "wal" {
		return nil, fmt.Errorf("eventlog/sqlite: %s: journal mode is %q, want wal (is the file system one SQLite can share memory on?)", l.path, mode)
	}
	if l.ckconn, err = l.wdb.Conn(ctx); err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: open %s: %w", l.path, err)
	}
	// The checkpointer never waits for a lock (see runCheckpointer).
	if _, err := l.ckconn.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: open %s: %w", l.path, err)
	}
	if err := repairSummaries(ctx, l.wconn, l.path); err != nil {
		return nil, l.busyErr(err)
	}
	if err := migrate(ctx, l.wconn, l.path, alone); err != nil {
		return nil, l.busyErr(err)
	}
	if alone {
		if err := narrowEpochIndex(ctx, l.wconn, l.path); err != nil {
			return nil, l.busyErr(err)
		}
		if err := narrowIDIndex(ctx, l.wconn, l.path); err != nil {
			return nil, l.busyErr(err)
		}
		if err := dropEpochIndex(ctx, l.wconn, l.path); err != nil {
			return nil, l.busyErr(err)
		}
	}
	if err := l.wconn.Raw(func(dc any) error { return l.w.prepare(ctx, dc) }); err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: %s: %w", l.path, err)
	}

	if l.rdb, err = sql.Open("sqlite", dsn(l.path, busy, "query_only(1)")); err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: open %s: %w", l.path, err)
	}
	l.rdb.SetMaxOpenConns(cfg.ReadConns)
	l.rdb.SetMaxIdleConns(cfg.ReadConns)
	if err := l.prepareReads(ctx); err != nil {
		return nil, err
	}

	go l.runWriter()
	go l.runCheckpointer()
	return l, nil
}

// prepareReads prepares the statements of Read and Sessions on the read pool.
func (l *Log) prepareReads(ctx context.Context) (err error) {
	if l.read, err = l.rdb.PrepareContext(ctx, `SELECT id, seq, type, version, causation_id, correlation_id, ts, actor, payload, epoch
		FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq`); err != nil {
		return fmt.Errorf("eventlog/sqlite: %s: prepare read: %w", l.path, err)
	}
	if l.readEpoch, err = l.rdb.PrepareContext(ctx, readEpochQuery); err != nil {
		return fmt.Errorf("eventlog/sqlite: %s: prepare read: %w", l.path, err)
	}
	if l.list, err = l.rdb.PrepareContext(ctx, `SELECT session_id, `+sessionStatus+`, events, last_seq, steps, started_us, updated_us, `+sessionParent+`
		FROM sessions WHERE started_us >= ? AND (? = '' OR `+sessionStatus+` = ?)
		AND (? = '' OR (session_id >= ? AND substr(CAST(session_id AS BLOB), 1, length(CAST(? AS BLOB))) = CAST(? AS BLOB)))
		AND (? = 0 OR updated_us >= ?)
		AND (? = 0 OR (`+eventlog.NotPrefixed("substr", "session_id")+`))
		AND (? = '' OR `+sessionAgent+` = ?)
		ORDER BY started_us DESC, session_id LIMIT ?`); err != nil {
		return fmt.Errorf("eventlog/sqlite: %s: prepare sessions: %w", l.path, err)
	}
	if l.listRunning, err = l.rdb.PrepareContext(ctx, listRunningQuery); err != nil {
		return fmt.Errorf("eventlog/sqlite: %s: prepare running sessions: %w", l.path, err)
	}
	return nil
}

// listRunningQuery lists the running sessions (Filter{Status: running,
// SessionsOnly: true}) through the index sessions_running, which holds them only:
// its cost is that of the running sessions, not of every stream of the log.
var listRunningQuery = `SELECT session_id, 'running', events, last_seq, steps, started_us, updated_us, ` + sessionParent + `
		FROM sessions INDEXED BY sessions_running WHERE ` + runningWhere + `
		AND (` + eventlog.NotPrefixed("substr", "session_id") + `)
		AND started_us >= ? AND (? = 0 OR updated_us >= ?)
		ORDER BY started_us DESC, session_id LIMIT ?`

// dsn is the modernc.org/sqlite data source name of the database at path with pragmas.
func dsn(path string, pragmas ...string) string {
	q := url.Values{"_pragma": pragmas}
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(path), RawQuery: q.Encode()}
	return u.String()
}

// Append implements eventlog.Log. The batch is validated here, then handed to the
// writer goroutine, which may commit it in one transaction together with batches of
// concurrent callers; each caller gets the outcome of its own batch. On a read-only
// Log every Append, even of an empty batch, fails with an error wrapping ErrReadOnly.
func (l *Log) Append(ctx context.Context, events []messages.Envelope) error {
	return l.append(ctx, nil, events, false)
}

// AppendLeased implements eventlog.Fencing: the writer checks, in the transaction
// that writes the batch, that lease.Epoch is the partition's current epoch, so a
// stale owner's batch either commits before the next Own or fails with ErrFenced.
func (l *Log) AppendLeased(ctx context.Context, lease eventlog.Lease, events []messages.Envelope) error {
	return l.append(ctx, &lease, events, false)
}

// append hands a batch to the writer: a claim (Claim, ClaimLeased) when claim is set.
func (l *Log) append(ctx context.Context, lease *eventlog.Lease, events []messages.Envelope, claim bool) error {
	if err := l.writable(ctx, "append", "append to"); err != nil {
		return err
	}
	check := eventlog.CheckBatch
	if claim {
		check = eventlog.CheckClaim
	}
	batch, err := check(events)
	if err != nil {
		return err
	}
	if len(batch) == 0 {
		return nil
	}
	for _, e := range batch {
		if e.Seq > math.MaxInt64 {
			return fmt.Errorf("%w: event %s (session %s): seq %d is beyond what SQLite stores (2^63-1)",
				eventlog.ErrInvalidEvent, e.ID, e.SessionID, e.Seq)
		}
	}
	if lease != nil && (lease.Partition < 0 || lease.Partition > math.MaxInt32) {
		return fmt.Errorf("%w: %s (partition out of range)", eventlog.ErrFenced, lease)
	}
	r := l.reqPool.Get().(*appendReq)
	r.ctx, r.events, r.lease, r.claim, r.pooled = ctx, batch, lease, claim, true
	return l.submit(ctx, r)
}

// Own implements eventlog.Fencing. The epoch is taken in a write transaction, which
// SQLite serializes with every other one (of every process sharing the log): no
// two Own calls get the same epoch, and none overlaps an append's check.
func (l *Log) Own(ctx context.Context, node string, partitions []int) (uint64, error) {
	o, err := l.own(ctx, "own", node, partitions)
	if err != nil {
		return 0, err
	}
	return o.epoch, nil
}

// TakeOver implements eventlog.Releasing: Own, whose transaction reads each
// partition's latest owner record before it records the new epoch, so that the
// records returned are exactly those the epoch superseded.
func (l *Log) TakeOver(ctx context.Context, node string, partitions []int) (uint64, map[int]eventlog.Ownership, error) {
	o, err := l.own(ctx, "take over", node, partitions)
	if err != nil {
		return 0, nil, err
	}
	return o.epoch, o.previous, nil
}

// own runs an Own (what names it in errors) in a write transaction of the writer.
func (l *Log) own(ctx context.Context, what, node string, partitions []int) (*ownReq, error) {
	if err := eventlog.CheckOwn(node, partitions); err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: %s: %w", what, err)
	}
	if err := l.writable(ctx, what, what+": own partitions of"); err != nil {
		return nil, err
	}
	for _, p := range partitions {
		if p > math.MaxInt32 {
			return nil, fmt.Errorf("eventlog/sqlite: %s: partition %d out of range", what, p)
		}
	}
	o := &ownReq{node: node, partitions: partitions}
	if err := l.submit(ctx, &appendReq{ctx: ctx, own: o, done: make(chan error, 1)}); err != nil {
		return nil, err
	}
	return o, nil
}

// submit hands req to the writer goroutine and waits for its outcome.
func (l *Log) submit(ctx context.Context, req *appendReq) error {
	select {
	case l.reqs <- req:
	case <-l.closing:
		return fmt.Errorf("eventlog/sqlite: append: %w", eventlog.ErrClosed)
	case <-ctx.Done():
		return fmt.Errorf("eventlog/sqlite: append: %w", ctx.Err())
	}
	select {
	case err := <-req.done:
		l.recycle(req)
		return err
	case <-ctx.Done():
		return fmt.Errorf("eventlog/sqlite: append: %w (the batch may or may not have been written)", ctx.Err())
	case <-l.writerDone:
		// The writer answers every request it takes before it stops: no answer
		// means the request was queued after the writer's last look at the queue.
		select {
		case err := <-req.done:
			l.recycle(req)
			return err
		default:
			return fmt.Errorf("eventlog/sqlite: append: %w", eventlog.ErrClosed)
		}
	}
}

// recycle returns an answered append request to the pool: the writer is done with
// it once it has answered. A request left unanswered (its caller's ctx ended) is
// not reused, as the writer may still take it.
func (l *Log) recycle(r *appendReq) {
	if !r.pooled {
		return
	}
	*r = appendReq{done: r.done}
	l.reqPool.Put(r)
}

// Read implements eventlog.Log.
func (l *Log) Read(ctx context.Context, sessionID string, fromSeq uint64) ([]messages.Envelope, error) {
	return l.ReadN(ctx, sessionID, fromSeq, 0, 0)
}

var _ eventlog.PageReader = (*Log)(nil)

// ReadN implements eventlog.PageReader: Read, stopped after n events (0: all)
// or after the event that brings the payload read to maxBytes (0: no bound).
// The rows are read in seq order as the query yields them, so a page of a long
// session reads and decodes that page, not the rest of the session.
func (l *Log) ReadN(ctx context.Context, sessionID string, fromSeq uint64, n, maxBytes int) ([]messages.Envelope, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: read session %s: %w", sessionID, err)
	}
	if l.isClosed() {
		return nil, fmt.Errorf("eventlog/sqlite: read session %s: %w", sessionID, eventlog.ErrClosed)
	}
	if fromSeq > math.MaxInt64 {
		return nil, nil // no stored seq is that high
	}
	// Events of a stale owner are hidden after the first event of a later epoch
	// (eventlog.Superseded): start from the highest epoch before fromSeq.
	var before int64
	if fromSeq > 1 {
		if err := l.readEpoch.QueryRowContext(ctx, sessionID, int64(fromSeq)).Scan(&before); err != nil {
			return nil, l.readErr(fmt.Sprintf("read session %s", sessionID), err)
		}
	}
	rows, err := l.read.QueryContext(ctx, sessionID, int64(fromSeq))
	if err != nil {
		return nil, l.readErr(fmt.Sprintf("read session %s", sessionID), err)
	}
	defer rows.Close()
	var (
		events  []messages.Envelope
		last    int64
		payload int // bytes of the events' payloads
	)
	for rows.Next() {
		var (
			r     storedEvent
			epoch int64
		)
		if err := rows.Scan(&r.id, &r.seq, &r.typ, &r.version, &r.causation, &r.correlation, &r.ts, &r.actor, &r.payload, &epoch); err != nil {
			return nil, fmt.Errorf("eventlog/sqlite: session %s, event after seq %d: %w: %v", sessionID, last, messages.ErrCorrupt, err)
		}
		if eventlog.Superseded(uint64(epoch), uint64(before)) {
			continue
		}
		before = max(before, epoch)
		e, err := r.envelope(sessionID)
		if err != nil {
			if seq, ok := r.seq.(int64); ok {
				return nil, fmt.Errorf("eventlog/sqlite: session %s seq %d: %w: %v", sessionID, seq, messages.ErrCorrupt, err)
			}
			return nil, fmt.Errorf("eventlog/sqlite: session %s, event after seq %d: %w: %v", sessionID, last, messages.ErrCorrupt, err)
		}
		last = int64(e.Seq)
		events = append(events, e)
		payload += len(e.Payload)
		if n > 0 && len(events) == n || maxBytes > 0 && payload >= maxBytes {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return nil, l.readErr(fmt.Sprintf("read session %s after seq %d", sessionID, last), err)
	}
	return events, nil
}

// storedEvent is one row of the events table as scanned. Integers are scanned into
// any and text into NullString, so that any value a damaged or hand-edited file holds
// scans, and envelope can say what is wrong with it.
type storedEvent struct {
	id, typ, causation, correlation, actor sql.NullString
	seq, version, ts                       any
	payload                                []byte
}

// envelope returns the stored event, or what is wrong with it.
func (r *storedEvent) envelope(sessionID string) (messages.Envelope, error) {
	seq, seqOK := r.seq.(int64)
	version, versionOK := r.version.(int64)
	ts, tsOK := r.ts.(int64)
	switch {
	case !seqOK || seq <= 0:
		return messages.Envelope{}, fmt.Errorf("seq %v is not a positive integer", r.seq)
	case !r.id.Valid || r.id.String == "":
		return messages.Envelope{}, errors.New("missing id")
	case !r.typ.Valid || r.typ.String == "":
		return messages.Envelope{}, errors.New("missing type")
	case !versionOK:
		return messages.Envelope{}, fmt.Errorf("version %v is not an integer", r.version)
	case !tsOK:
		return messages.Envelope{}, fmt.Errorf("ts %v is not an integer", r.ts)
	case !r.causation.Valid || !r.correlation.Valid || !r.actor.Valid:
		return messages.Envelope{}, errors.New("NULL causation_id, correlation_id or actor")
	case !messages.ValidJSON(r.payload):
		return messages.Envelope{}, fmt.Errorf("payload (%d bytes) is not valid JSON", len(r.payload))
	}
	return messages.Envelope{
		ID:            r.id.String,
		SessionID:     sessionID,
		Seq:           uint64(seq),
		Type:          messages.Type(r.typ.String),
		Version:       int(version),
		CausationID:   r.causation.String,
		CorrelationID: r.correlation.String,
		TS:            ts,
		Actor:         r.actor.String,
		Payload:       r.payload,
	}, nil
}

// Sessions implements eventlog.Log. It reads the summary table: one row per session.
func (l *Log) Sessions(ctx context.Context, f eventlog.Filter) ([]eventlog.SessionInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: list sessions: %w", err)
	}
	if l.isClosed() {
		return nil, fmt.Errorf("eventlog/sqlite: list sessions: %w", eventlog.ErrClosed)
	}
	if f.Limit < 0 {
		return nil, fmt.Errorf("eventlog/sqlite: list sessions: negative limit %d", f.Limit)
	}
	since, limit := f.SinceUS, int64(f.Limit)
	if since == 0 {
		since = math.MinInt64 // the zero Filter lists every session, even one started before 1970
	}
	if limit == 0 {
		limit = -1 // no bound
	}
	switch f.Status {
	case "", messages.StatusRunning, messages.StatusCompleted, messages.StatusFailed:
	default:
		return nil, fmt.Errorf("eventlog/sqlite: list sessions: unknown status %q", f.Status)
	}
	// This process's writer writes its summary rows that lag first (lag.go). A
	// read-only Log, or a writer that cannot write them now (a full disk), lists
	// them rebuilt from their events instead, in the listing's read transaction.
	rebuild := l.cfg.ReadOnly
	if err := l.syncSummaries(ctx, "list sessions"); err != nil {
		if ctx.Err() != nil || l.isClosed() {
			return nil, err
		}
		rebuild = true
	}
	list, listRunning := l.list, l.listRunning
	var lagged map[string]eventlog.SessionInfo
	if rebuild {
		tx, err := l.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return nil, l.readErr("list sessions", err)
		}
		defer tx.Rollback() //nolint:errcheck // a read transaction: nothing to undo
		if lagged, err = rebuildLagged(ctx, tx); err != nil {
			return nil, l.readErr("list sessions", err)
		}
		if f.Agent != "" {
			if err := keepAgent(ctx, tx, lagged, f.Agent); err != nil {
				return nil, l.readErr("list sessions", err)
			}
		}
		if limit > 0 {
			limit += int64(len(lagged))
		}
		list, listRunning = tx.StmtContext(ctx, l.list), tx.StmtContext(ctx, l.listRunning)
	}
	var rows *sql.Rows
	var err error
	if f.Status == messages.StatusRunning && f.SessionsOnly && f.Prefix == "" && f.Agent == "" {
		rows, err = listRunning.QueryContext(ctx, since, f.UpdatedSinceUS, f.UpdatedSinceUS, limit)
	} else {
		rows, err = list.QueryContext(ctx, since, f.Status, f.Status, f.Prefix, f.Prefix, f.Prefix, f.Prefix, f.UpdatedSinceUS, f.UpdatedSinceUS, f.SessionsOnly, f.Agent, f.Agent, limit)
	}
	if err != nil {
		return nil, l.readErr("list sessions", err)
	}
	defer rows.Close()
	var infos []eventlog.SessionInfo
	for rows.Next() {
		var (
			i       eventlog.SessionInfo
			lastSeq int64
		)
		var parent sql.NullString
		if err := rows.Scan(&i.ID, &i.Status, &i.Events, &lastSeq, &i.Steps, &i.StartedUS, &i.UpdatedUS, &parent); err != nil {
			return nil, fmt.Errorf("eventlog/sqlite: list sessions: %w: %v", messages.ErrCorrupt, err)
		}
		i.LastSeq, i.Parent = uint64(lastSeq), parent.String
		infos = append(infos, i)
	}
	if err := rows.Err(); err != nil {
		return nil, l.readErr("list sessions", err)
	}
	if len(lagged) > 0 {
		infos = overlay(infos, lagged, f, since)
	}
	return infos, nil
}

// readErr wraps an error of the read pool, as ErrClosed if Close raced the read, or
// as ErrBusy if the database stayed locked.
func (l *Log) readErr(what string, err error) error {
	err = l.busyErr(err)
	if l.isClosed() && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("eventlog/sqlite: %s: %w (%v)", what, eventlog.ErrClosed, err)
	}
	return fmt.Errorf("eventlog/sqlite: %s: %w", what, err)
}

// Stats counts the work of a Log since Open: its own appends, not those of other
// processes sharing the log (Config.Shared).
type Stats struct {
	// Appends is the number of Append calls the writer finished, written or refused.
	Appends uint64
	// Transactions is the number of write transactions committed. Appends divided by
	// Transactions is how many calls group commit coalesced on average.
	Transactions uint64
	// Events is the number of events written; duplicates that were skipped are not.
	Events uint64
}

// Stats returns the counters of l.
func (l *Log) Stats() Stats {
	return Stats{
		Appends:      l.stats.appends.Load(),
		Transactions: l.stats.transactions.Load(),
		Events:       l.stats.events.Load(),
	}
}

// writable reports why a write cannot be made now: ctx is done or the log closed
// ("eventlog/sqlite: <what>: <cause>"), or the log is read-only
// ("eventlog/sqlite: <readOnly> <path>: ErrReadOnly", readOnly saying what the
// write does to the log: "append to").
func (l *Log) writable(ctx context.Context, what, readOnly string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("eventlog/sqlite: %s: %w", what, err)
	}
	if l.isClosed() {
		return fmt.Errorf("eventlog/sqlite: %s: %w", what, eventlog.ErrClosed)
	}
	if l.cfg.ReadOnly {
		return fmt.Errorf("eventlog/sqlite: %s %s: %w", readOnly, l.path, ErrReadOnly)
	}
	return nil
}

func (l *Log) isClosed() bool {
	select {
	case <-l.closing:
		return true
	default:
		return false
	}
}

// Close implements eventlog.Log: it stops taking appends, waits up to
// Config.CloseTimeout for the queued ones to be written, then closes the database
// and releases the directory lock. It is idempotent and returns the first call's
// result. If the writer does not finish in time, the lock is kept (another process
// must not write while this one still might) and Close says so.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		close(l.closing)
		if l.cfg.ReadOnly { // no writer, no checkpointer, no lock
			l.closeErr = l.release()
			return
		}
		timer := time.NewTimer(l.cfg.CloseTimeout)
		defer timer.Stop()
		select {
		case <-all(l.writerDone, l.ckDone):
		case <-timer.C:
			l.closeErr = fmt.Errorf("eventlog/sqlite: close %s: the writer did not finish within %s; the data directory stays locked until this process exits",
				l.path, l.cfg.CloseTimeout)
			return
		}
		l.closeErr = l.release()
	})
	return l.closeErr
}

// release closes whatever Open opened, the lock last.
func (l *Log) release() error {
	var errs []error
	if l.read != nil {
		errs = append(errs, l.read.Close())
	}
	if l.readEpoch != nil {
		errs = append(errs, l.readEpoch.Close())
	}
	if l.listRunning != nil {
		errs = append(errs, l.listRunning.Close())
	}
	if l.list != nil {
		errs = append(errs, l.list.Close())
	}
	if l.rdb != nil {
		errs = append(errs, l.rdb.Close())
	}
	if l.wconn != nil {
		errs = append(errs, l.wconn.Raw(func(any) error { return l.w.close() }))
		errs = append(errs, l.wconn.Close())
	}
	if l.ckconn != nil {
		errs = append(errs, l.ckconn.Close())
	}
	if l.wdb != nil {
		errs = append(errs, l.wdb.Close())
	}
	if err := errors.Join(errs...); err != nil {
		errs = []error{fmt.Errorf("eventlog/sqlite: close %s: %w", l.path, err)}
	}
	if l.lock != nil {
		errs = append(errs, unlockDir(l.lock, l.cfg.Shared))
	}
	return errors.Join(errs...)
}
