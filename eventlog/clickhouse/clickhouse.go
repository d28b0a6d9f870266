package clickhouse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/ext"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// Log is the ClickHouse event log. A single writer goroutine gathers the batches of
// concurrent Append calls and writes them with few large INSERTs; Read and Sessions
// query the server directly. It is safe for concurrent use.
type Log struct {
	cfg  Config
	conn driver.Conn

	mu        sync.Mutex
	queue     []*appendReq  // FIFO of queued requests (canceled ones are skipped)
	qEvents   int           // events of the queued requests
	qBytes    int           // payload bytes of the queued requests
	bufEvents int           // events queued or being written: bounded by MaxBuffered
	bufBytes  int           // their payload bytes: bounded by MaxBufferedBytes
	space     chan struct{} // closed when buffer room frees up; nil if nobody waits
	closed    bool

	wake       chan struct{} // tells the writer that the queue has work (capacity 1)
	closing    chan struct{} // closed by Close
	writerDone chan struct{} // closed when the writer goroutine returns
	gone       chan struct{} // closed when Close returns: nobody will answer any more
	abort      context.CancelFunc
	closeOnce  sync.Once
	closeErr   error

	stats struct {
		appends, inserts, events, retries, failures, waits atomic.Uint64
	}

	// failing is the outage of the writer's writes under way, nil while its last
	// attempt went through (Writable, health.go); probes paces its probe writes.
	failing atomic.Pointer[writeFailure]
	probes  eventlog.Probes

	// beforeInsert, set by tests only, runs before each INSERT of events, and
	// beforeConfirm after each INSERT of leased events, before their leases are
	// confirmed. cutInsert, set by tests only, runs before each INSERT of events
	// too: if it returns an error, the INSERT is not sent and the attempt fails
	// with it, as one cut off does (the hook writes what the cut one wrote).
	beforeInsert, beforeConfirm func()
	cutInsert                   func([]row) error
	// externalTables, set by tests only, is given the external tables that lookup
	// sends with its next query (the compatibility dump records their rows).
	externalTables func([]*ext.Table)

	repairs sync.WaitGroup // repairCut's
	// repairCtx is the context of the repairs; stopRepairs ends it once the writer
	// stopped (Close: the buffered appends are written or failed).
	repairCtx   context.Context
	stopRepairs context.CancelFunc
	// settles are the background repairs of compacted streams' summaries
	// (background, settleLater's worker): Close waits for them.
	settles sync.WaitGroup
	// unsettled are the streams whose summaries settleLater's worker is to
	// write anew; nil while no worker runs. l.mu guards it.
	unsettled map[string]struct{}
	// settleWait bounds the waits of the summaries' repairs for mutations
	// (defaultSettleWait; tests shorten it).
	settleWait time.Duration
	// pairs are the rewrites of summaries under way (rewriteSummary): Close
	// waits for them rather than cut one between its two statements.
	pairs sync.WaitGroup
	// betweenSummary, set by tests only, runs between the two statements of a
	// summary's rewrite; beforeTake, before settleLater's worker takes the
	// streams queued.
	betweenSummary func(stream string)
	beforeTake     func()

	// lastSaved is the saved_us of the last fold snapshot saved (savedUS).
	lastSaved atomic.Uint64

	// rowSizes sizes the first window of ReadN's next page of a session.
	rowSizes rowSizes
}

var (
	_ eventlog.Log     = (*Log)(nil)
	_ eventlog.Fencing = (*Log)(nil)
	_ eventlog.Health  = (*Log)(nil)
)

// abortGrace is how long Close waits for the writer to stop after it aborted it.
const abortGrace = 5 * time.Second

// Open connects to ClickHouse, creates the database and brings its schema to
// SchemaVersion (see Migrations), and starts the writer. While the server cannot be
// reached, Open retries with the configured backoff until ctx ends (or, with
// Config.OpenWait, until that long has passed).
func Open(ctx context.Context, cfg Config) (*Log, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	opts := options(cfg)
	var conn driver.Conn
	began := time.Now()
	for attempt := 0; ; attempt++ {
		var err error
		conn, err = connect(ctx, opts, cfg.Database, cfg.MustExist)
		if err == nil {
			break
		}
		if !retryable(err) || ctx.Err() != nil {
			return nil, err
		}
		wait := backoff(cfg, attempt)
		if cfg.OpenWait > 0 && time.Since(began)+wait > cfg.OpenWait {
			return nil, fmt.Errorf("%w (gave up after %d attempts in %s)", err, attempt+1, time.Since(began).Round(time.Second))
		}
		cfg.Logger.Warn("eventlog/clickhouse: cannot open the event log, retrying", "err", err, "attempt", attempt+1, "retry_in", wait.Round(time.Millisecond))
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		}
	}
	l := start(cfg, rereading{conn, cfg.MaxOpenConns})
	if !cfg.NoSummaryRepair {
		l.background(l.repairSummaries)
	}
	return l, nil
}

// start returns a Log of cfg (with defaults) on conn, its writer running.
func start(cfg Config, conn driver.Conn) *Log {
	wctx, abort := context.WithCancel(context.Background())
	repairCtx, stopRepairs := context.WithCancel(wctx)
	l := &Log{
		cfg:        cfg,
		conn:       conn,
		wake:       make(chan struct{}, 1),
		closing:    make(chan struct{}),
		writerDone: make(chan struct{}),
		gone:       make(chan struct{}),
		abort:      abort,
		probes:     eventlog.Probes{Every: probeInterval},

		repairCtx:   repairCtx,
		stopRepairs: stopRepairs,
		settleWait:  defaultSettleWait,
	}
	go l.runWriter(wctx)
	return l
}

// connect opens a connection pool to the database, creating (unless mustExist)
// and migrating it.
func connect(ctx context.Context, opts *ch.Options, database string, mustExist bool) (driver.Conn, error) {
	where := strings.Join(opts.Addr, ",")
	if err := createDatabase(ctx, opts, database, mustExist); err != nil {
		if errors.Is(err, ErrNoLog) {
			return nil, err
		}
		if mustExist {
			return nil, fmt.Errorf("eventlog/clickhouse: look up database %s on %s: %w", database, where, err)
		}
		return nil, fmt.Errorf("eventlog/clickhouse: create database %s on %s: %w", database, where, err)
	}
	conn, err := ch.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("eventlog/clickhouse: connect to %s: %w", where, err)
	}
	if err := conn.Ping(ctx); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("eventlog/clickhouse: connect to %s: %w", where, err)
	}
	if err := migrate(ctx, conn, database); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return conn, nil
}

// options translates cfg (with defaults) into clickhouse-go options: the native
// protocol, since HTTP fails against ClickHouse 18.16.
func options(cfg Config) *ch.Options {
	o := &ch.Options{
		Protocol:        ch.Native,
		Addr:            cfg.Addr,
		Auth:            ch.Auth{Database: cfg.Database, Username: cfg.Username, Password: cfg.Password},
		TLS:             cfg.TLS,
		DialTimeout:     cfg.DialTimeout,
		DialContext:     dialer(cfg),
		ReadTimeout:     cfg.QueryTimeout,
		MaxOpenConns:    cfg.MaxOpenConns,
		MaxIdleConns:    cfg.MaxOpenConns,
		ConnMaxLifetime: time.Hour,
		ClientInfo: ch.ClientInfo{Products: []struct{ Name, Version string }{
			{Name: "troupe-eventlog", Version: fmt.Sprint(SchemaVersion)},
		}},
	}
	switch cfg.Compression {
	case "lz4":
		o.Compression = &ch.Compression{Method: ch.CompressionLZ4}
	case "zstd":
		o.Compression = &ch.Compression{Method: ch.CompressionZSTD}
	}
	return o
}

// Append implements eventlog.Log. The batch is validated here and buffered; the
// writer goroutine writes it, usually in one INSERT together with the batches of
// concurrent callers, and Append returns once ClickHouse accepted that INSERT (or
// the batch was refused). While ClickHouse is unreachable Append blocks, and the
// writer retries, until the write succeeds or ctx ends. See the package doc for
// what is atomic and what is not.
func (l *Log) Append(ctx context.Context, events []messages.Envelope) error {
	return l.append(ctx, nil, events, false)
}

// append queues a batch for the writer: a claim (Claim, ClaimLeased) when claim is set.
func (l *Log) append(ctx context.Context, lease *eventlog.Lease, events []messages.Envelope, claim bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("eventlog/clickhouse: append: %w (not written)", err)
	}
	if l.isClosed() {
		return fmt.Errorf("eventlog/clickhouse: append: %w", eventlog.ErrClosed)
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
	// The writer may still read a batch after Append returned (when ctx ended while
	// it was being written): it works on copies of the payloads, which the caller owns,
	// and of the events (CheckBatch may return the caller's slice).
	batch = slices.Clone(batch)
	if lease != nil && (lease.Partition < 0 || lease.Partition > math.MaxUint32) {
		return fmt.Errorf("%w: %s (partition out of range)", eventlog.ErrFenced, lease)
	}
	req := &appendReq{ctx: ctx, lease: lease, claim: claim, events: batch, payloads: make([]string, len(batch)), done: make(chan error, 1)}
	for i := range batch {
		req.payloads[i] = string(batch[i].Payload)
		batch[i].Payload = nil
		req.bytes += len(req.payloads[i])
	}
	if err := l.enqueue(ctx, req); err != nil {
		return err
	}
	select {
	case err := <-req.done:
		return err
	case <-l.gone:
		select {
		case err := <-req.done:
			return err
		default:
			return fmt.Errorf("eventlog/clickhouse: append: %w (the batch may or may not have been written)", eventlog.ErrClosed)
		}
	case <-ctx.Done():
		if l.cancel(req) {
			return fmt.Errorf("eventlog/clickhouse: append: %w (not written)", ctx.Err())
		}
		select {
		case err := <-req.done:
			return err
		default:
			return fmt.Errorf("eventlog/clickhouse: append: %w (the batch may or may not have been written)", ctx.Err())
		}
	}
}

// readQuery reads a session without FINAL: rows of an event written twice that
// have not merged yet are collapsed by Read, which also notices two different
// events at one seq and epoch instead of letting the merge pick one, and picks the
// highest epoch at each seq (eventlog.Fencing). Its last column says whether
// fenced_events lists the row (staleTail).
//
// The session and its seqs are a PREWHERE, as in the other queries of events
// that pick sessions by the key and read other columns than the key's
// (statuses, closeOpenTasks, summaryQuery, the prunes): ClickHouse reads the
// key's columns of the granules the primary key selects, and the other columns
// (the payloads) of the granules with rows that pass it only. With a WHERE,
// 18.16 reads every column of the granules the key selects, among them the last
// granule of each part whose rows sort before the session (it takes a part's
// last granule to reach to the end of the key) and the granule before the
// session's first: a Read of 6 small events after a session of 10 MB of
// payloads read 10.4 MB, 24 KB with the PREWHERE
// (TestSessionReadsSkipOtherSessionsPayloads). The writer's lookup needs none:
// 18.16 moves its conditions on the appended positions and IDs to PREWHERE
// itself (they are not the key's columns alone).
const readQuery = readColumns + readOrder

// readWindowQuery is readQuery for the rows of the next seqs stored from a seq
// on, as many as the LIMIT formatted in (fewer where rows share a seq): ReadN
// reads a session a window at a time, so that a page of a long session reads and
// transfers about that page, not the rest of the session (clickhouse-go reads
// a result to its end when its rows are closed early, and ClickHouse sends up to
// max_block_size rows, 65,536, in one block). The bound is a scalar subquery,
// which ClickHouse runs first and puts in as a constant, so that the primary key
// (session_id, seq, epoch) skips the granules after it; the subquery reads the
// seq column only. Its arguments are readQuery's, then the session and the seq
// again.
const readWindowQuery = readColumns + `
	AND seq <= (SELECT max(seq) FROM (SELECT seq FROM events PREWHERE session_id = ? AND seq >= ? ORDER BY seq LIMIT %d))` + readOrder

// readBytesWindowQuery is readWindowQuery for a page bounded by bytes: of the
// rows of readWindowQuery's window, it ends at the seq of the row that brings
// their payload, in order, to the bytes the page still lacks (the argument
// after readQuery's; twice the payload of the last window's rows when those
// added no event to the page, as ReadN doubles the seqs of such a window), or
// at the last row if they fall short of it. The window's
// LIMIT is sized by an estimate of the bytes per row (page.window), which alone
// did not bound what a window transfers: after a session's events grew from
// 10 bytes to 200 KB, a window of a page of 1 MiB read 1,000 rows of 200 KB.
// The sizes are payload_size (schema 17), not the payloads, so that the bound
// costs little. Parts written before schema 17 do not store it: there the
// bound reads the payloads of the window's rows (it is computed from them),
// until a merge writes those parts anew, which is why the window is bounded
// first by the scalar subquery that reads the seq column only (without it the
// subquery reads the rest of the session there, ClickHouse 18.16 reading all
// the rows of a LIMIT before it sorts them). The sum counts every row, copies
// and stale owners' too: a window may end short of the page, never beyond it,
// and ReadN then reads the next. Arrays, not window functions, which 18.16
// lacks; the rows are sorted by seq in the array, whatever order they reach
// groupArray in. An empty window's bound is 0 (the array's default): it reads
// no row. Its arguments are readQuery's, the bytes, then the session and the
// seq twice.
const readBytesWindowQuery = readColumns + `
	AND seq <= (SELECT seqs[greatest(least(arrayCount(x -> x < ?, arrayCumSum(sizes)) + 1, length(seqs)), 1)]
	FROM (SELECT arrayMap(r -> tupleElement(r, 1), rs) AS seqs, arrayMap(r -> tupleElement(r, 2), rs) AS sizes
	FROM (SELECT arraySort(groupArray((seq, payload_size))) AS rs FROM events PREWHERE session_id = ? AND seq >= ?
	AND seq <= (SELECT max(seq) FROM (SELECT seq FROM events PREWHERE session_id = ? AND seq >= ? ORDER BY seq LIMIT %d)))))` + readOrder

const (
	readColumns = `SELECT seq, epoch, id, type, version, causation_id, correlation_id, ts, actor, payload,
	(seq, epoch) IN (SELECT seq, epoch FROM fenced_events WHERE session_id = ?)
FROM events PREWHERE session_id = ? AND seq >= ?`
	readOrder = `
ORDER BY seq, epoch DESC, id`
)

// readEpochQuery finds the highest epoch of a session's events before a seq: Read
// from a later seq starts from it (eventlog.Superseded). It is also the highest
// epoch of the events Read would return before that seq, since an event of the
// highest epoch is never hidden.
const readEpochQuery = `SELECT max(epoch) FROM events PREWHERE session_id = ? AND seq < ?`

// Read implements eventlog.Log. Of the rows at one seq it returns the event of the
// highest epoch, and it hides a stale owner's events: those of an epoch below
// that of an event before them (eventlog.Superseded), and those that a fenced
// writer wrote last (staleTail).
func (l *Log) Read(ctx context.Context, sessionID string, fromSeq uint64) ([]messages.Envelope, error) {
	return l.ReadN(ctx, sessionID, fromSeq, 0, 0)
}

var _ eventlog.PageReader = (*Log)(nil)

// Window sizes of ReadN, in seqs: the first window of a page bounded by bytes
// only, of a session none of whose pages was read lately (later ones are sized
// by the payload of the rows read so far, rowSizes), and the largest window.
const (
	firstWindow = 64
	maxWindow   = 1024
)

// rowSizes remembers the payload per row of the last page ReadN read of each
// session, up to maxRowSizes sessions (then it starts again): the first window
// of the session's next page is sized by it. Each window costs a query that
// reads whole granules (1,024 rows of the events table), whatever rows it
// returns: a page read in one window instead of two took half the time
// (replay export of a session of 20,000 events of 10 KB, read in pages of
// 1 MiB: 14 s instead of 40 s on ClickHouse 18.16). Sessions are kept apart so
// that a session of small events does not size the window of one of large
// events.
type rowSizes struct {
	mu sync.Mutex
	m  map[string]int
}

const maxRowSizes = 1024

func (r *rowSizes) get(session string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[session]
}

func (r *rowSizes) set(session string, perRow int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m) >= maxRowSizes {
		r.m = make(map[string]int)
	}
	r.m[session] = perRow
}

// ReadN implements eventlog.PageReader: Read, stopped after n events (0: all)
// or after the event that brings the payload read to maxBytes (0: no bound).
// A bounded page is read in windows of seqs (readWindowQuery), each sized by
// the events the page still lacks and by the payload per row read so far: a
// page of a long session reads about that page, not the rest of the session.
// The window of a page bounded by bytes also ends where the stored sizes of
// its rows' payloads reach the bytes the page lacks (readBytesWindowQuery), so
// that events larger than the estimate do not make it read many pages' bytes.
// Events that fenced_events lists at the end of what was read are returned
// only once a later event that Read returns too is found (staleTail): a page
// that would end with them reads on until one comes, which it leaves out, or
// the session ends, and then it leaves them out.
func (l *Log) ReadN(ctx context.Context, sessionID string, fromSeq uint64, n, maxBytes int) ([]messages.Envelope, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("eventlog/clickhouse: read session %s: %w", sessionID, err)
	}
	if l.isClosed() {
		return nil, fmt.Errorf("eventlog/clickhouse: read session %s: %w", sessionID, eventlog.ErrClosed)
	}
	qctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
	defer cancel()
	s := sessionRows{session: sessionID}
	if fromSeq > 1 {
		if err := l.conn.QueryRow(qctx, readEpochQuery, sessionID, fromSeq).Scan(&s.before); err != nil {
			return nil, l.readErr(ctx, fmt.Sprintf("read session %s", sessionID), err)
		}
	}
	p := page{n: n, maxBytes: maxBytes, perRow: l.rowSizes.get(sessionID)}
	if n <= 0 && maxBytes <= 0 {
		if _, err := l.readRows(ctx, qctx, &s, &p, readQuery, sessionID, sessionID, fromSeq); err != nil {
			return nil, err
		}
		return p.events, nil
	}
	var (
		from   = fromSeq
		window int
		// reach is the payload of the rows of the last window when it added
		// no event to the page (0 when it did): the next window's rows reach
		// twice that, as its seqs are twice the last window's, so that a run
		// of rows Read hides, or of fenced events pending while the page's
		// bytes are reached, is read in a few windows, not one a seq.
		reach int
	)
	for {
		window = p.window(&s, window)
		before, read := len(p.events), s.bytes
		var (
			w   windowRead
			err error
		)
		if maxBytes > 0 {
			w, err = l.readRows(ctx, qctx, &s, &p, fmt.Sprintf(readBytesWindowQuery, window), sessionID, sessionID, from, max(p.lacks(), uint64(2*reach)), sessionID, from, sessionID, from)
		} else {
			w, err = l.readRows(ctx, qctx, &s, &p, fmt.Sprintf(readWindowQuery, window), sessionID, sessionID, from, sessionID, from)
		}
		switch {
		case err != nil:
			return nil, err
		case w.full || w.rows == 0 || s.seq == math.MaxUint64:
			// Full, or the session's end: pending fenced events are its tail.
			if maxBytes > 0 && s.rows > 0 {
				l.rowSizes.set(sessionID, max(s.bytes/s.rows, 1))
			}
			return p.events, nil
		}
		if len(p.events) > before {
			window, reach = 0, 0 // the page grew: size the next window afresh
		} else {
			reach = s.bytes - read
		}
		from = s.seq + 1
	}
}

// windowRead is what readRows read of one query's rows.
type windowRead struct {
	rows int
	full bool // the page was filled
}

// readRows runs query and folds its rows (readQuery's columns and order) into
// p, through s, until p is full or the rows end. Once p is full it still folds
// the rest of the rows at the seq of the last one, as Read does: two events of
// one epoch there are ErrCorrupt, not a page that ends with the one whose ID
// sorts first (the next page starts after that seq).
func (l *Log) readRows(ctx, qctx context.Context, s *sessionRows, p *page, query string, args ...any) (windowRead, error) {
	var w windowRead
	rows, err := l.conn.Query(qctx, query, args...)
	if err != nil {
		return w, l.readErr(ctx, fmt.Sprintf("read session %s", s.session), err)
	}
	defer rows.Close()
	for rows.Next() {
		r, err := s.scan(rows)
		if err != nil {
			return w, err
		}
		if w.full && r.e.Seq != s.seq {
			break
		}
		e, fenced, found, err := s.next(r)
		if err != nil {
			return w, err
		}
		w.rows++
		if found && !w.full {
			w.full = p.add(e, fenced)
		}
	}
	if err := rows.Err(); err != nil {
		return w, l.readErr(ctx, fmt.Sprintf("read session %s after seq %d", s.session, s.lastSeq), err)
	}
	return w, nil
}

// sessionRows folds the rows of a session, in readQuery's order, into the events
// Read returns before it leaves out their fenced tail (staleTail): at each seq
// the event of the highest epoch, and none of a stale owner's
// (eventlog.Superseded).
type sessionRows struct {
	session string
	// before is the highest epoch of the events found so far, and before the
	// first seq read (readEpochQuery).
	before uint64
	// The seq of the last row and the highest epoch at it, and whether that
	// epoch's event was hidden (and if not, its ID); any is false before the
	// first row.
	seq, top    uint64
	hidden, any bool
	id          string
	lastSeq     uint64 // of the last event found
	rows, bytes int    // rows read, and their payload bytes
}

// readRow is a row of readQuery's columns.
type readRow struct {
	e      messages.Envelope
	epoch  uint64
	listed bool // fenced_events lists it
}

// scan scans the current row of rows.
func (s *sessionRows) scan(rows driver.Rows) (readRow, error) {
	var (
		r       = readRow{e: messages.Envelope{SessionID: s.session}}
		typ     string
		version int64
		payload string
		listed  uint8
	)
	if err := rows.Scan(&r.e.Seq, &r.epoch, &r.e.ID, &typ, &version, &r.e.CausationID, &r.e.CorrelationID, &r.e.TS, &r.e.Actor, &payload, &listed); err != nil {
		return r, fmt.Errorf("eventlog/clickhouse: session %s, event after seq %d: %w: %v", s.session, s.lastSeq, messages.ErrCorrupt, err)
	}
	r.e.Type, r.e.Version, r.e.Payload, r.listed = messages.Type(typ), int(version), json.RawMessage(payload), listed != 0
	return r, nil
}

// next folds the next row, r. It returns its event, whether fenced_events
// lists it, and whether Read finds it: false for a copy of the event found at
// its seq, a lower epoch's event there, or a stale owner's.
func (s *sessionRows) next(r readRow) (e messages.Envelope, fenced, found bool, err error) {
	e, epoch := r.e, r.epoch
	s.rows++
	s.bytes += len(e.Payload)
	if s.any && e.Seq == s.seq {
		switch {
		case epoch < s.top || s.hidden:
			return e, false, false, nil // a stale owner's event, or one beside it
		case s.id == e.ID:
			return e, false, false, nil // written twice, not merged yet
		}
		return e, false, false, fmt.Errorf("eventlog/clickhouse: session %s seq %d: %w: two events of epoch %d hold it, %s and %s (two writers raced)",
			s.session, e.Seq, messages.ErrCorrupt, epoch, s.id, e.ID)
	}
	s.any, s.seq, s.top = true, e.Seq, epoch
	if s.hidden = eventlog.Superseded(epoch, s.before); s.hidden {
		return e, false, false, nil
	}
	if err := checkStored(e); err != nil {
		return e, false, false, fmt.Errorf("eventlog/clickhouse: session %s seq %d: %w: %s", s.session, e.Seq, messages.ErrCorrupt, err)
	}
	s.before = max(s.before, epoch)
	s.id, s.lastSeq = e.ID, e.Seq
	return e, r.listed, true, nil
}

// page gathers the events ReadN returns: at most n (n ≤ 0: no bound), up to
// the one that brings their payload to maxBytes (maxBytes ≤ 0: no bound). The
// events found that fenced_events lists wait in pending until an event not
// listed follows them (staleTail): at the end of the rows they are left out.
type page struct {
	n, maxBytes int
	perRow      int // the payload per row of the session's last page; 0: unknown
	events      []messages.Envelope
	bytes       int // payload of events
	pending     []messages.Envelope
	pendingSize int // payload of pending
}

// add adds an event found, fenced if fenced_events lists it, and reports
// whether the page is full.
func (p *page) add(e messages.Envelope, fenced bool) bool {
	if fenced {
		p.pending = append(p.pending, e)
		p.pendingSize += len(e.Payload)
		return false
	}
	for _, f := range p.pending {
		if p.push(f) {
			return true // e is left out, with the rest of pending
		}
	}
	p.pending, p.pendingSize = p.pending[:0], 0
	return p.push(e)
}

func (p *page) push(e messages.Envelope) bool {
	p.events = append(p.events, e)
	p.bytes += len(e.Payload)
	return p.n > 0 && len(p.events) >= p.n || p.maxBytes > 0 && p.bytes >= p.maxBytes
}

// window returns the seqs the next window of a bounded page reads: the events
// the page lacks, in count and, at the payload per row read so far (s; before
// the first row, that of the session's last page, else firstWindow seqs), in
// bytes, at least one and at most maxWindow; twice the last window (last, 0 if
// the page grew since) when that added no event to the page (its rows were
// hidden, or fenced and pending).
func (p *page) window(s *sessionRows, last int) int {
	k := maxWindow
	if p.n > 0 {
		k = min(k, p.n-len(p.events)-len(p.pending))
	}
	if p.maxBytes > 0 {
		perRow := p.perRow
		if s.rows > 0 {
			perRow = max(s.bytes/s.rows, 1)
		}
		if perRow == 0 {
			k = min(k, firstWindow)
		} else {
			k = min(k, (p.maxBytes-p.bytes-p.pendingSize)/perRow+1)
		}
	}
	return min(max(k, 2*last, 1), maxWindow)
}

// lacks returns the payload bytes a page bounded by bytes lacks, counting its
// pending events: the next window reads up to the row that reaches them (at
// least one row, when the pending events reach them already).
func (p *page) lacks() uint64 {
	return uint64(max(p.maxBytes-p.bytes-p.pendingSize, 0))
}

// checkStored says what is wrong with a stored event, if anything.
func checkStored(e messages.Envelope) error {
	switch {
	case e.Seq == 0:
		return errors.New("seq 0")
	case e.ID == "":
		return errors.New("missing id")
	case e.Type == "":
		return errors.New("missing type")
	case !messages.ValidJSON(e.Payload):
		return fmt.Errorf("payload (%d bytes) is not valid JSON", len(e.Payload))
	}
	return nil
}

// sessionsQuery merges the per-session summaries (the sessions table, which a
// materialized view fills from every insert into events) with their task counts
// (session_tasks, likewise), then with the parent a child session's first event
// names (a task.submitted whose payload has parent.session_id:
// messages.TaskSubmitted.Parent), read from the payloads of the events at seq 1.
// The aliases differ from the column names on purpose: ClickHouse resolves
// aliases everywhere in a query, and an alias named like the column it aggregates
// would refer to itself. A session without task events has no session_tasks row,
// and one that is no child no parent: the LEFT JOINs give it zero counts and "".
// ClickHouse 18.16 joins two tables per SELECT, hence the nesting; current
// releases want an alias on each joined subquery (joined_subquery_requires_alias),
// hence the aliases, which nothing refers to. was_fenced
// says that fenced_events lists events of the session: a stale owner's, which the
// summaries count (see suspect).
const sessionsQuery = `SELECT session_id, n_events, n_steps, max_seq, latest_task_type, first_us, last_us, n_tasks, n_ended, parent_id,
	session_id IN (SELECT session_id FROM fenced_events) AS was_fenced
FROM (SELECT session_id, n_events, n_steps, max_seq, latest_task_type, first_us, last_us, n_tasks, n_ended
FROM (SELECT session_id,
	uniqExactMerge(events) AS n_events,
	uniqExactIfMerge(steps) AS n_steps,
	maxMerge(last_seq) AS max_seq,
	argMaxIfMerge(status_type) AS latest_task_type,
	minMerge(started_us) AS first_us,
	maxMerge(updated_us) AS last_us
FROM sessions
GROUP BY session_id) AS summaries
ANY LEFT JOIN (SELECT session_id,
	uniqExactIfMerge(tasks) AS n_tasks,
	uniqExactIfMerge(ended) AS n_ended
FROM session_tasks
GROUP BY session_id) AS task_counts USING session_id) AS counted
ANY LEFT JOIN (SELECT session_id,
	any(visitParamExtractString(visitParamExtractRaw(payload, 'parent'), 'session_id')) AS parent_id
FROM events
WHERE seq = 1 AND type = 'task.submitted'
GROUP BY session_id) AS parents USING session_id`

// runningQuery is sessionsQuery for the running sessions (Filter{Status: running,
// SessionsOnly: true}): it reads the summaries (session_summaries) of the
// sessions that open_tasks holds with a task not ended, by key, rather than every
// summary, so that its cost is that of the running sessions, not of every stream
// the log ever had. open_tasks holds every running session and may hold a few
// more (see schema/0008_running_sessions.sql): Sessions filters with runningCond
// as it does over sessionsQuery. It also reads the sessions with a stale owner's
// events not settled in fenced_events: a stale task.completed or task.failed
// ends its task in open_tasks (and in the summary), although the session's new
// owner still runs it; Sessions checks them against their events.
const runningQuery = `SELECT session_id, n_events, n_steps, max_seq, latest_task_type, first_us, last_us, n_tasks, n_ended, parent_id,
	session_id IN (SELECT session_id FROM fenced_events) AS was_fenced
FROM (SELECT session_id,
	uniqExactMerge(events) AS n_events,
	uniqExactIfMerge(steps) AS n_steps,
	maxMerge(last_seq) AS max_seq,
	argMaxIfMerge(status_type) AS latest_task_type,
	minMerge(started_us) AS first_us,
	maxMerge(updated_us) AS last_us,
	uniqExactIfMerge(tasks) AS n_tasks,
	uniqExactIfMerge(ended) AS n_ended,
	anyIfMerge(parent) AS parent_id
FROM session_summaries
WHERE session_id IN (SELECT session_id FROM open_tasks GROUP BY session_id HAVING max(sign) > 0)
	OR session_id IN (SELECT session_id FROM fenced_events GROUP BY session_id, seq, epoch HAVING max(settled) = 0)
GROUP BY session_id)`

// The status filters of Sessions: eventlog.SessionStatus in SQL. Both also keep
// the sessions whose summary may count a stale owner's events (suspect): endedCond
// those whose latest task ended though they count more tasks than ended ones,
// and both those with events in fenced_events. Sessions checks them against their
// events.
const (
	runningCond = "(n_tasks > n_ended OR latest_task_type NOT IN ('task.completed', 'task.failed') OR was_fenced)"
	endedCond   = "(latest_task_type = ? OR was_fenced)"
)

// agentCond keeps the sessions of an agent (eventlog.Filter.Agent): those whose
// first task.submitted (the lowest seq) names it, "default" for one naming none,
// as the analytics charge a session to the agent of its first task (taskAgents).
// visitParamExtractString reads the payload's first "agent" key: a task's payload
// has no other (a string value that holds one has its quotes escaped).
const agentCond = `session_id IN (SELECT session_id FROM (SELECT session_id,
	argMin(if(visitParamExtractString(payload, 'agent') = '', 'default', visitParamExtractString(payload, 'agent')), seq) AS first_agent
FROM events
WHERE type = 'task.submitted'
GROUP BY session_id) AS first_tasks WHERE first_agent = ?)`

// Sessions implements eventlog.Log. It reads the sessions summary table: one row
// per session once its parts merged, a few more before.
func (l *Log) Sessions(ctx context.Context, f eventlog.Filter) ([]eventlog.SessionInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("eventlog/clickhouse: list sessions: %w", err)
	}
	if l.isClosed() {
		return nil, fmt.Errorf("eventlog/clickhouse: list sessions: %w", eventlog.ErrClosed)
	}
	if f.Limit < 0 {
		return nil, fmt.Errorf("eventlog/clickhouse: list sessions: negative limit %d", f.Limit)
	}
	// open: the running sessions are read from the candidates open_tasks holds,
	// filtered here rather than in SQL, so that those it holds though they ended,
	// or are no session, are seen, and removed from it (closeOpenTasks).
	open := f.Status == messages.StatusRunning && f.SessionsOnly
	q := sessionsQuery
	if open {
		q = runningQuery
	}
	var args, condArgs []any
	var conds []string
	if f.SinceUS != 0 { // the zero Filter lists every session, even one started before 1970
		conds = append(conds, "first_us >= ?")
		condArgs = append(condArgs, f.SinceUS)
	}
	if f.Prefix != "" {
		conds = append(conds, "startsWith(session_id, ?)")
		condArgs = append(condArgs, f.Prefix)
	}
	if f.UpdatedSinceUS != 0 {
		conds = append(conds, "last_us >= ?")
		condArgs = append(condArgs, f.UpdatedSinceUS)
	}
	if f.SessionsOnly && !open {
		conds = append(conds, "("+notNotes+")")
	}
	if f.Agent != "" {
		conds = append(conds, agentCond)
		condArgs = append(condArgs, f.Agent)
	}
	switch f.Status {
	case "":
	case messages.StatusCompleted, messages.StatusFailed:
		conds = append(conds, endedCond)
		condArgs = append(condArgs, "task."+f.Status)
	case messages.StatusRunning:
		if !open {
			conds = append(conds, runningCond)
		}
	default:
		return nil, fmt.Errorf("eventlog/clickhouse: list sessions: unknown status %q", f.Status)
	}
	if len(conds) > 0 {
		q += "\nWHERE " + strings.Join(conds, " AND ")
		args = append(args, condArgs...)
	}
	q += "\nORDER BY first_us DESC, session_id"
	if f.Limit > 0 && !open {
		q += fmt.Sprintf("\nLIMIT %d", f.Limit)
	}
	qctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
	defer cancel()
	rows, err := l.conn.Query(qctx, q, args...)
	if err != nil {
		return nil, l.readErr(ctx, "list sessions", err)
	}
	defer rows.Close()
	var (
		infos    []eventlog.SessionInfo
		suspects []string
	)
	for rows.Next() {
		var (
			i             eventlog.SessionInfo
			events, steps uint64
			tasks, ended  uint64
			taskType      string
			fenced        uint8
		)
		if err := rows.Scan(&i.ID, &events, &steps, &i.LastSeq, &taskType, &i.StartedUS, &i.UpdatedUS, &tasks, &ended, &i.Parent, &fenced); err != nil {
			return nil, fmt.Errorf("eventlog/clickhouse: list sessions: %w: %v", messages.ErrCorrupt, err)
		}
		i.Events, i.Steps = int(events), int(steps)
		latest, _ := eventlog.TaskStatus(messages.Type(taskType))
		i.Status = eventlog.SessionStatus(latest, tasks, ended)
		if fenced != 0 || suspect(latest, tasks, ended) {
			suspects = append(suspects, i.ID)
		}
		infos = append(infos, i)
	}
	if err := rows.Err(); err != nil {
		return nil, l.readErr(ctx, "list sessions", err)
	}
	if len(suspects) == 0 && !open {
		return infos, nil
	}
	var folds map[string]*fold
	if len(suspects) > 0 {
		if folds, err = l.statuses(qctx, suspects); err != nil {
			return nil, l.readErr(ctx, "list sessions: check the status of sessions taken over", err)
		}
	}
	var closed []string // open_tasks holds them, though they ended or are no session
	kept := infos[:0]
	for _, i := range infos {
		gone := false // every event of the session is a stale owner's
		if s, ok := folds[i.ID]; ok {
			i.Status, i.Events, i.Steps, i.LastSeq = s.status, s.events, s.steps, s.lastSeq
			gone = s.events == 0
		}
		switch {
		case open && (gone || i.Status != messages.StatusRunning || !eventlog.IsSession(i.ID)):
			closed = append(closed, i.ID)
		case gone:
		case f.Status == "" || i.Status == f.Status:
			kept = append(kept, i)
		}
	}
	if open {
		if f.Limit > 0 && len(kept) > f.Limit {
			kept = kept[:f.Limit]
		}
		if len(closed) > 0 {
			if err := l.closeOpenTasks(qctx, closed, folds); err != nil {
				l.cfg.Logger.Warn("eventlog/clickhouse: could not remove ended sessions from open_tasks; the next listing of the running sessions tries again",
					"sessions", len(closed), "err", err)
			}
		}
	}
	return kept, nil
}

// closeOpenTasks removes from open_tasks the rows of sessions that it holds though
// they ended, or are no session: a task's row +1 written twice (an INSERT retried
// after an outcome the writer could not know, or schema 8 applied during writes), a
// stale owner's, or the row keyed ” of a stream whose first event is no
// task.submitted (such as a stored bus message's, eventlog.BusStreamPrefix). Each
// listing of the running sessions reads them among the candidates, so that without
// this their cost would grow with every such session ever; once removed, the next
// merge collapses them. It adds a row -1 for each row +1 left of a task whose end is
// recorded, and of the key ”, never of a task not ended: a task submitted since the
// sessions' status was read keeps its row. Removing a row twice (two listings at
// once) leaves a row -1, which no listing reads. Of the sessions whose events
// statuses read (folds), the ends are those Read returns, and the rows of a stale
// task.submitted that fenced_events lists and Read leaves out are removed too (as
// many as it lists); their rows in fenced_events are settled: the sessions ended
// without them.
func (l *Log) closeOpenTasks(ctx context.Context, sessions []string, folds map[string]*fold) error {
	args := make([]any, len(sessions))
	for i, id := range sessions {
		args[i] = id
	}
	in := strings.TrimSuffix(strings.Repeat("?, ", len(sessions)), ", ")
	var unfolded []any // the sessions whose ends are read here
	for _, id := range sessions {
		if folds[id] == nil {
			unfolded = append(unfolded, id)
		}
	}
	ended := map[[2]string]bool{}
	if len(unfolded) > 0 {
		rows, err := l.conn.Query(ctx, "SELECT DISTINCT session_id, correlation_id FROM events PREWHERE session_id IN ("+
			strings.TrimSuffix(strings.Repeat("?, ", len(unfolded)), ", ")+") AND type IN ('task.completed', 'task.failed')", unfolded...)
		if err != nil {
			return fmt.Errorf("read the ended tasks: %w", err)
		}
		for rows.Next() {
			var k [2]string
			if err := rows.Scan(&k[0], &k[1]); err != nil {
				rows.Close()
				return fmt.Errorf("read the ended tasks: %w", err)
			}
			ended[k] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read the ended tasks: %w", err)
		}
	}
	type left struct {
		session, task string
		n             int64
	}
	var lefts []left
	rows, err := l.conn.Query(ctx, "SELECT session_id, task, toInt64(sum(sign)) FROM open_tasks WHERE session_id IN ("+in+") GROUP BY session_id, task HAVING sum(sign) > 0", args...)
	if err != nil {
		return fmt.Errorf("read open_tasks: %w", err)
	}
	for rows.Next() {
		var r left
		if err := rows.Scan(&r.session, &r.task, &r.n); err != nil {
			rows.Close()
			return fmt.Errorf("read open_tasks: %w", err)
		}
		f := folds[r.session]
		switch {
		case r.task == "" || ended[[2]string{r.session, r.task}] || (f != nil && f.ended[r.task]):
			lefts = append(lefts, r)
		case f != nil && f.stale[r.task] > 0:
			r.n = min(r.n, f.stale[r.task])
			lefts = append(lefts, r)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read open_tasks: %w", err)
	}
	if len(folds) > 0 {
		if err := l.conn.Exec(ctx, "INSERT INTO fenced_events (session_id, seq, epoch, type, task, settled)"+
			" SELECT session_id, seq, epoch, type, task, 1 FROM fenced_events WHERE session_id IN ("+in+") AND settled = 0", args...); err != nil {
			return fmt.Errorf("settle fenced_events: %w", err)
		}
	}
	if len(lefts) == 0 {
		return nil
	}
	b, err := l.conn.PrepareBatch(ctx, "INSERT INTO open_tasks (session_id, task, sign)")
	if err != nil {
		return err
	}
	for _, r := range lefts {
		for range r.n {
			if err := b.Append(r.session, r.task, int8(-1)); err != nil {
				_ = b.Abort()
				return err
			}
		}
	}
	return b.Send()
}

// suspect reports whether a session's summary (latest, the status of its
// highest-seq task.* event, and its numbers of tasks submitted and ended) may be
// wrong: its latest task ended, but it has more tasks than ended ones. A session
// with a task queued behind an ended one has a later task.submitted; a stale
// owner's task.submitted does not count in Read, but the summaries count every row
// (see the package doc's Fencing): written in the race window of a takeover, at a
// seq where the new owner wrote another event, it would keep the session running
// for good, listed at every start and partition assignment, after the new owner
// recorded the same task again and ended it. Such a session's status is read from
// its events (statuses).
func suspect(latest string, tasks, ended uint64) bool {
	return tasks > ended && (latest == messages.StatusCompleted || latest == messages.StatusFailed)
}

// statusQuery reads what statuses needs of the sessions' events: their seqs and
// epochs, the type of the task.* and model.requested ones, their task (an end's correlation ID, or the
// event's ID), and whether fenced_events lists them. Each IN list has one
// bound parameter (?) per session.
const statusQuery = `SELECT session_id, seq, epoch, if(type IN ('task.submitted', 'task.completed', 'task.failed', 'model.requested'), type, ''),
	if(type IN ('task.completed', 'task.failed'), correlation_id, id),
	(session_id, seq, epoch) IN (SELECT session_id, seq, epoch FROM fenced_events WHERE session_id IN (%[1]s))
FROM events PREWHERE session_id IN (%[1]s) ORDER BY session_id, seq, epoch DESC`

// fold is what statuses derives of a session's events: its status, and the
// number of its events and steps and its last seq, as Read returns them.
type fold struct {
	status        string
	events, steps int
	lastSeq       uint64
	// ended holds the tasks (correlation IDs) whose end Read returns, and stale the
	// rows of task.submitted events that fenced_events lists and Read leaves out,
	// by task (event ID).
	ended map[string]bool
	stale map[string]int64
}

// foldRow is an event that statuses folds.
type foldRow struct {
	seq       uint64
	typ, task string
	fenced    bool
}

// statuses derives the status of sessions from their events as Read returns them:
// at each seq the event of the highest epoch, a stale owner's events hidden
// (eventlog.Superseded), each seq counted once, and the events a fenced writer
// wrote last left out (staleTail).
func (l *Log) statuses(ctx context.Context, ids []string) (map[string]*fold, error) {
	args := make([]any, 2*len(ids))
	for i, id := range ids {
		args[i], args[len(ids)+i] = id, id
	}
	rows, err := l.conn.Query(ctx, fmt.Sprintf(statusQuery, strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	type session struct {
		fold
		rows        []foldRow // as Read returns them
		seq, before uint64
		any         bool
	}
	sessions := make(map[string]*session, len(ids))
	for rows.Next() {
		var (
			id, typ, task string
			seq, epoch    uint64
			fenced        uint8
		)
		if err := rows.Scan(&id, &seq, &epoch, &typ, &task, &fenced); err != nil {
			return nil, fmt.Errorf("%w: %v", messages.ErrCorrupt, err)
		}
		c := sessions[id]
		if c == nil {
			c = &session{fold: fold{ended: map[string]bool{}, stale: map[string]int64{}}}
			sessions[id] = c
		}
		r := foldRow{seq, typ, task, fenced != 0}
		if (c.any && seq == c.seq) || eventlog.Superseded(epoch, c.before) {
			// A lower epoch's row, or a copy, at a seq counted already, or a
			// stale owner's event that Read hides.
			if r.fenced && r.typ == string(messages.TypeTaskSubmitted) {
				c.stale[r.task]++
			}
			c.any, c.seq = true, seq
			continue
		}
		c.any, c.seq = true, seq
		c.before = max(c.before, epoch)
		c.rows = append(c.rows, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make(map[string]*fold, len(sessions))
	for id, c := range sessions {
		var (
			latest       string
			tasks, ended uint64
		)
		kept := staleTail(c.rows, func(r foldRow) bool { return r.fenced })
		for _, r := range c.rows[kept:] {
			if r.typ == string(messages.TypeTaskSubmitted) {
				c.stale[r.task]++
			}
		}
		c.events = kept
		for _, r := range c.rows[:kept] {
			c.lastSeq = r.seq
			if r.typ == string(messages.TypeModelRequested) {
				c.steps++
			}
			status, ok := eventlog.TaskStatus(messages.Type(r.typ))
			switch {
			case !ok:
				continue
			case status == messages.StatusRunning:
				tasks++
			default:
				ended++
				c.ended[r.task] = true
			}
			latest = status
		}
		c.status = eventlog.SessionStatus(latest, tasks, ended)
		out[id] = &c.fold
	}
	return out, nil
}

// staleTail returns how many of a session's events, as Read finds them, Read
// returns: all but the events at its end that fenced_events lists (fenced). Those
// were written by a stale owner after another node took the partition, and no
// owner wrote after them: the new owner may have read the session before they
// landed (it then writes at their seqs, and Read hides them), and its successor
// must not fold what it never folded. An event fenced_events lists but that
// another owner's events follow was read by that owner, and stays.
func staleTail[E any](events []E, fenced func(E) bool) int {
	n := len(events)
	for n > 0 && fenced(events[n-1]) {
		n--
	}
	return n
}

// readErr wraps an error of a query: as ctx's error if the caller's ctx ended,
// and as ErrClosed if Close raced the query.
func (l *Log) readErr(ctx context.Context, what string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("eventlog/clickhouse: %s: %w (%v)", what, cerr, err)
	}
	if l.isClosed() && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("eventlog/clickhouse: %s: %w (%v)", what, eventlog.ErrClosed, err)
	}
	return fmt.Errorf("eventlog/clickhouse: %s: %w", what, err)
}

// Stats counts the work of a Log since Open.
type Stats struct {
	// Appends is the number of Append calls the writer finished: written, found
	// already stored, or refused for a conflict.
	Appends uint64
	// Inserts is the number of INSERTs that wrote events; Appends divided by
	// Inserts is how many calls one insert carried on average.
	Inserts uint64
	// Events is the number of events inserted, including those inserted again
	// after a failed attempt (they collapse in storage); duplicates that the
	// writer found already stored are not inserted and not counted.
	Events uint64
	// Retries is the number of failed write attempts that were retried, and
	// Failures the number of Append calls failed by a permanent error.
	Retries, Failures uint64
	// Waits is the number of times an Append call waited for buffer room.
	Waits uint64
	// Buffered is the number of events waiting to be written or being written.
	Buffered int
}

// Stats returns the counters of l.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	buffered := l.bufEvents
	l.mu.Unlock()
	return Stats{
		Appends:  l.stats.appends.Load(),
		Inserts:  l.stats.inserts.Load(),
		Events:   l.stats.events.Load(),
		Retries:  l.stats.retries.Load(),
		Failures: l.stats.failures.Load(),
		Waits:    l.stats.waits.Load(),
		Buffered: buffered,
	}
}

func (l *Log) isClosed() bool {
	select {
	case <-l.closing:
		return true
	default:
		return false
	}
}

// Close implements eventlog.Log: it stops taking appends, lets the writer write
// what is buffered for up to Config.CloseTimeout (retrying while ClickHouse
// fails), fails what is still unwritten then with an error wrapping
// eventlog.ErrClosed, stops the background completion of attempts cut off after
// their callers gave up (see the package doc) and the background repairs of
// compacted streams' summaries (waiting for the rewrite of a summary under way,
// each of its two statements within the query timeout, rather than cutting it
// between them), and closes the connections. It is idempotent and returns
// the first call's result: an error if buffered appends could not be written.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		close(l.closing)
		timer := time.NewTimer(l.cfg.CloseTimeout)
		defer timer.Stop()
		var errs []error
		select {
		case <-l.writerDone:
		case <-timer.C:
			before := l.Stats()
			l.abort()
			// Every wait of the writer ends with its ctx; a query the client does
			// not abort promptly gets a grace period, then Close stops waiting.
			grace := time.NewTimer(abortGrace)
			defer grace.Stop()
			select {
			case <-l.writerDone:
			case <-grace.C:
			}
			errs = append(errs, fmt.Errorf("eventlog/clickhouse: close: buffered appends (%d events) were not written within %s and failed with ErrClosed",
				before.Buffered, l.cfg.CloseTimeout))
		}
		l.abort()
		l.settles.Wait() // their waits end with closing, their queries with the abort
		l.pairs.Wait()   // no more start; each statement of one under way ends within the query timeout
		close(l.gone)
		if err := l.conn.Close(); err != nil {
			errs = append(errs, fmt.Errorf("eventlog/clickhouse: close: %w", err))
		}
		l.closeErr = errors.Join(errs...)
	})
	return l.closeErr
}
