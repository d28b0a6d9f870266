package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/eventlogtest"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

func TestConformance(t *testing.T) {
	dirs := newLogDirs()
	eventlogtest.Run(t, dirs.features(), func(t *testing.T) eventlog.Log {
		return dirs.add(t.TempDir(), func(dir string) eventlog.Log { return open(t, sqlite.Config{Dir: dir}) })
	})
}

// TestConformanceNoGroupCommit runs the suite with group commit reduced to one
// event per transaction (each batch still one transaction), and one read connection.
func TestConformanceNoGroupCommit(t *testing.T) {
	dirs := newLogDirs()
	eventlogtest.Run(t, dirs.features(), func(t *testing.T) eventlog.Log {
		return dirs.add(t.TempDir(), func(dir string) eventlog.Log {
			return open(t, sqlite.Config{Dir: dir, MaxGroupEvents: 1, ReadConns: 1, QueueSize: 1})
		})
	})
}

func TestConformanceShared(t *testing.T) {
	dirs := newLogDirs()
	eventlogtest.Run(t, dirs.features(), func(t *testing.T) eventlog.Log {
		return dirs.add(t.TempDir(), func(dir string) eventlog.Log { return open(t, sqlite.Config{Dir: dir, Shared: true}) })
	})
}

// TestConformanceSharedWriters runs the suite against three Logs opened with Shared
// on one directory, as three processes would hold it: appends go to each in turn,
// reads to a fourth. Racing writers then race across Logs, each with its own
// writer, group commit and connections, and only SQLite serializes them; so do
// owners taking partitions and the appends they fence, and claims of one session.
func TestConformanceSharedWriters(t *testing.T) {
	dirs := newLogDirs()
	eventlogtest.Run(t, dirs.features(), func(t *testing.T) eventlog.Log {
		return dirs.add(t.TempDir(), func(dir string) eventlog.Log {
			s := &sharedLogs{reader: open(t, sqlite.Config{Dir: dir, Shared: true})}
			for range 3 {
				s.writers = append(s.writers, open(t, sqlite.Config{Dir: dir, Shared: true}))
			}
			return s
		})
	})
}

// logDirs remembers the data directory of each log a conformance run opens, so
// that Features.WriteStale can write into it behind the log's back.
type logDirs struct {
	mu   sync.Mutex
	dirs map[eventlog.Log]string
}

func newLogDirs() *logDirs { return &logDirs{dirs: map[eventlog.Log]string{}} }

func (d *logDirs) add(dir string, open func(dir string) eventlog.Log) eventlog.Log {
	l := open(dir)
	d.mu.Lock()
	d.dirs[l] = dir
	d.mu.Unlock()
	return l
}

// features are the strictest, with stale writes made by a raw INSERT that does
// what a stale owner's would, were its check not in the same transaction: the
// table's keys refuse it at a taken (session, seq).
func (d *logDirs) features() eventlogtest.Features {
	return eventlogtest.Features{
		FencingAtomic: true,
		WriteStale: func(t *testing.T, l eventlog.Log, epoch uint64, events []messages.Envelope) {
			t.Helper()
			d.mu.Lock()
			dir, ok := d.dirs[l]
			d.mu.Unlock()
			if !ok {
				t.Fatalf("WriteStale: log %p was not opened by this run", l)
			}
			db := rawDB(t, dir)
			for _, e := range events {
				if _, err := db.Exec(`INSERT INTO events (session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload, epoch)
					VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
					e.SessionID, int64(e.Seq), e.ID, string(e.Type), e.Version, e.CausationID, e.CorrelationID, e.TS, e.Actor, []byte(e.Payload), int64(epoch)); err != nil {
					t.Fatalf("WriteStale: %v", err)
				}
			}
		},
	}
}

// sharedLogs is one eventlog.Log made of several Logs opened with Shared on one
// directory: Append, AppendLeased, Own, Release and the prunes go to each writer in
// turn, Read, Sessions and Owners to the reader.
type sharedLogs struct {
	writers []*sqlite.Log
	reader  *sqlite.Log
	next    atomic.Uint64
}

func (s *sharedLogs) writer() *sqlite.Log { return s.writers[s.next.Add(1)%uint64(len(s.writers))] }

func (s *sharedLogs) Append(ctx context.Context, events []messages.Envelope) error {
	return s.writer().Append(ctx, events)
}

func (s *sharedLogs) AppendLeased(ctx context.Context, lease eventlog.Lease, events []messages.Envelope) error {
	return s.writer().AppendLeased(ctx, lease, events)
}

func (s *sharedLogs) Claim(ctx context.Context, events []messages.Envelope) error {
	return s.writer().Claim(ctx, events)
}

func (s *sharedLogs) ClaimLeased(ctx context.Context, lease eventlog.Lease, events []messages.Envelope) error {
	return s.writer().ClaimLeased(ctx, lease, events)
}

func (s *sharedLogs) Own(ctx context.Context, node string, partitions []int) (uint64, error) {
	return s.writer().Own(ctx, node, partitions)
}

func (s *sharedLogs) Release(ctx context.Context, node string, epoch uint64, partitions []int, atUS int64) error {
	return s.writer().Release(ctx, node, epoch, partitions, atUS)
}

func (s *sharedLogs) MarkPublished(ctx context.Context, node string, epoch uint64, partitions []int, throughUS int64) error {
	return s.writer().MarkPublished(ctx, node, epoch, partitions, throughUS)
}

func (s *sharedLogs) TakeOver(ctx context.Context, node string, partitions []int) (uint64, map[int]eventlog.Ownership, error) {
	return s.writer().TakeOver(ctx, node, partitions)
}

func (s *sharedLogs) Owners(ctx context.Context, partitions []int) (map[int]eventlog.Ownership, error) {
	return s.reader.Owners(ctx, partitions)
}

func (s *sharedLogs) PruneBusStreams(ctx context.Context, beforeUS int64, limit int) (int, error) {
	return s.writer().PruneBusStreams(ctx, beforeUS, limit)
}

func (s *sharedLogs) PruneStreams(ctx context.Context, prefix string, beforeUS int64, limit int) (int, error) {
	return s.writer().PruneStreams(ctx, prefix, beforeUS, limit)
}

func (s *sharedLogs) PruneListed(ctx context.Context, streams []eventlog.StreamBound) (int, error) {
	return s.writer().PruneListed(ctx, streams)
}

func (s *sharedLogs) Read(ctx context.Context, sessionID string, fromSeq uint64) ([]messages.Envelope, error) {
	return s.reader.Read(ctx, sessionID, fromSeq)
}

func (s *sharedLogs) Sessions(ctx context.Context, f eventlog.Filter) ([]eventlog.SessionInfo, error) {
	return s.reader.Sessions(ctx, f)
}

func (s *sharedLogs) Close() error {
	errs := []error{s.reader.Close()}
	for _, w := range s.writers {
		errs = append(errs, w.Close())
	}
	return errors.Join(errs...)
}

// TestBusyIsRetryable holds SQLite's write lock from another connection, as the
// writer of another process sharing the log does while it commits: Appends wait
// for BusyTimeout, then fail with ErrBusy, which is neither ErrSeqConflict nor
// ErrInvalidEvent (callers retry it), and write nothing. Reads go on meanwhile. Once
// the lock is released, the same appends succeed.
func TestBusyIsRetryable(t *testing.T) {
	dir := t.TempDir()
	l := open(t, sqlite.Config{Dir: dir, Shared: true, BusyTimeout: 50 * time.Millisecond})
	ctx := testCtx(t)
	appendSeqs(t, l, "s", 1, 2)
	conn, err := rawDB(t, dir).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}

	const callers = 4 // concurrent, so that some share a group
	batches := make([][]messages.Envelope, callers)
	for i := range batches {
		batches[i] = []messages.Envelope{event(t, "s", uint64(3+i))}
	}
	var (
		wg   sync.WaitGroup
		errs = make([]error, callers)
	)
	for i := range callers {
		wg.Go(func() { errs[i] = l.Append(ctx, batches[i]) })
	}
	waitGroup(t, &wg, time.Minute)
	for i, err := range errs {
		if !errors.Is(err, sqlite.ErrBusy) || errors.Is(err, eventlog.ErrSeqConflict) || errors.Is(err, eventlog.ErrInvalidEvent) {
			t.Fatalf("Append %d while another connection holds the write lock = %v, want ErrBusy only", i, err)
		}
		// Readers that must succeed (a session's start, a resume listing) wait
		// a busy database out, as any outage, rather than give up.
		if got := eventlog.ClassifyFailure(err); got != eventlog.FailureTemporary {
			t.Fatalf("ClassifyFailure(%v) = %d, want FailureTemporary", err, got)
		}
	}
	if got, err := l.Read(ctx, "s", 0); err != nil || len(got) != 2 {
		t.Fatalf("Read while another connection holds the write lock = %d events, %v; want the 2 committed before", len(got), err)
	}

	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	for _, b := range batches { // the retry a caller makes
		if err := l.Append(ctx, b); err != nil {
			t.Fatalf("retried Append = %v", err)
		}
	}
	wantEvents(t, l, "s", 2+callers)
}

func open(t testing.TB, cfg sqlite.Config) *sqlite.Log {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := sqlite.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// event returns event seq of session, with a real payload.
func event(t testing.TB, session string, seq uint64) messages.Envelope {
	t.Helper()
	var p messages.Payload = &messages.ModelRequested{Key: fmt.Sprintf("%s/m%d", session, seq), Model: "offline", Step: int(seq), Messages: 2 * int(seq), PromptHash: "9f86d081884c7d65"}
	switch seq % 4 {
	case 1:
		p = &messages.TaskSubmitted{Input: "What is 12 * (7 + 5)?", Agent: "default"}
	case 3:
		p = &messages.ModelResponded{Key: fmt.Sprintf("%s/m%d", session, seq-1), Model: "offline",
			Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "144"}, LatencyUS: 812}
	case 0:
		p = &messages.ToolCallCompleted{Key: "k", CallID: "call_1", Tool: "calculator", Result: "144", LatencyUS: 35}
	}
	e, err := messages.NewEnvelope(p)
	if err != nil {
		t.Fatal(err)
	}
	e.ID = fmt.Sprintf("%s/%d", session, seq)
	e.SessionID = session
	e.Seq = seq
	e.CorrelationID = session + "/1"
	e.TS = 1_767_225_600_000_000 + int64(seq)
	e.Actor = "session"
	return e
}

func TestConfigValidate(t *testing.T) {
	if err := (sqlite.Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "Dir") {
		t.Fatalf("Validate(zero Config) = %v, want an error naming Dir", err)
	}
	bad := sqlite.Config{Dir: "x", BusyTimeout: -1, MaxGroupEvents: -1, QueueSize: -1, ReadConns: -1, CloseTimeout: -1}
	err := bad.Validate()
	for _, field := range []string{"BusyTimeout", "MaxGroupEvents", "QueueSize", "ReadConns", "CloseTimeout"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Validate = %v, want it to name %s", err, field)
		}
	}
	if err := (sqlite.Config{Dir: "x"}).Validate(); err != nil {
		t.Fatalf("Validate(Dir only) = %v", err)
	}
	d := sqlite.Config{Dir: "x"}.WithDefaults()
	if d.BusyTimeout != sqlite.DefaultBusyTimeout || d.MaxGroupEvents != sqlite.DefaultMaxGroupEvents ||
		d.QueueSize != sqlite.DefaultQueueSize || d.ReadConns != sqlite.DefaultReadConns || d.CloseTimeout != sqlite.DefaultCloseTimeout {
		t.Fatalf("WithDefaults = %+v", d)
	}
	if _, err := sqlite.Open(testCtx(t), bad); err == nil {
		t.Fatal("Open with an invalid config succeeded")
	}
}

// TestReopen shows that events, summaries and the schema survive Close and Open, and
// that opening an up-to-date database migrates nothing.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := testCtx(t)
	l, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	want := []messages.Envelope{event(t, "s-1", 1), event(t, "s-1", 2), event(t, "s-1", 3)}
	if err := l.Append(ctx, want); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		l = open(t, sqlite.Config{Dir: dir})
		got, err := l.Read(ctx, "s-1", 0)
		if err != nil || len(got) != 3 || got[2].ID != want[2].ID {
			t.Fatalf("Read after reopen = %d events, %v", len(got), err)
		}
		infos, err := l.Sessions(ctx, eventlog.Filter{})
		if err != nil || len(infos) != 1 || infos[0].Events != 3 || infos[0].Steps != 1 {
			t.Fatalf("Sessions after reopen = %+v, %v", infos, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	db := rawDB(t, dir)
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != sqlite.SchemaVersion {
		t.Fatalf("user_version = %d, %v; want %d", v, err, sqlite.SchemaVersion)
	}
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
	}
}

func TestFutureSchemaRefused(t *testing.T) {
	dir := t.TempDir()
	l := open(t, sqlite.Config{Dir: dir})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := rawDB(t, dir).Exec(fmt.Sprintf("PRAGMA user_version = %d", sqlite.SchemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	_, err := sqlite.Open(testCtx(t), sqlite.Config{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "newer build") {
		t.Fatalf("Open(database of a newer schema) = %v, want a refusal", err)
	}
	// The failed Open released the lock: once the version is back, Open works.
	if _, err := rawDB(t, dir).Exec(fmt.Sprintf("PRAGMA user_version = %d", sqlite.SchemaVersion)); err != nil {
		t.Fatal(err)
	}
	open(t, sqlite.Config{Dir: dir})
}

// rawDB opens the database file of a data directory with plain SQL, the way an
// operator with the sqlite3 shell would.
func rawDB(t testing.TB, dir string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(dir, "events.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func TestCorruptRowsAreReported(t *testing.T) {
	cases := []struct {
		name   string
		update string
	}{
		{"PayloadGarbage", `UPDATE events SET payload = X'00FF17C0DE' WHERE session_id = 's-1' AND seq = 3`},
		{"PayloadTruncated", `UPDATE events SET payload = substr(payload, 1, 9) WHERE session_id = 's-1' AND seq = 3`},
		{"TypeEmpty", `UPDATE events SET type = '' WHERE session_id = 's-1' AND seq = 3`},
		{"IDEmpty", `UPDATE events SET id = '' WHERE session_id = 's-1' AND seq = 3`},
		{"TSNotANumber", `UPDATE events SET ts = 'yesterday' WHERE session_id = 's-1' AND seq = 3`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := open(t, sqlite.Config{Dir: dir})
			ctx := testCtx(t)
			var events []messages.Envelope
			for seq := uint64(1); seq <= 5; seq++ {
				events = append(events, event(t, "s-1", seq))
			}
			if err := l.Append(ctx, events); err != nil {
				t.Fatal(err)
			}
			res, err := rawDB(t, dir).Exec(tc.update)
			if n, _ := res.RowsAffected(); err != nil || n != 1 {
				t.Fatalf("corrupting the row: %d rows, %v", n, err)
			}
			for _, from := range []uint64{0, 3} {
				got, err := l.Read(ctx, "s-1", from)
				if !errors.Is(err, messages.ErrCorrupt) {
					t.Fatalf("Read(from %d) = %d events, %v; want an error wrapping ErrCorrupt", from, len(got), err)
				}
				if msg := err.Error(); !strings.Contains(msg, "session s-1") || !strings.Contains(msg, "seq ") {
					t.Fatalf("error %q does not name the session and seq", msg)
				}
				if !strings.Contains(err.Error(), "seq 3") && !strings.Contains(err.Error(), "after seq 2") {
					t.Fatalf("error %q does not point at seq 3", err)
				}
				if got != nil {
					t.Fatalf("Read returned %d events with the error", len(got))
				}
			}
			// The events after the corrupt one are readable on their own: nothing is lost.
			got, err := l.Read(ctx, "s-1", 4)
			if err != nil || len(got) != 2 {
				t.Fatalf("Read(from 4) = %d events, %v", len(got), err)
			}
		})
	}
}

func waitGroup(t testing.TB, wg *sync.WaitGroup, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("goroutines did not finish within %s", d)
	}
}

func TestSeqBeyondInt64IsInvalid(t *testing.T) {
	l := open(t, sqlite.Config{Dir: t.TempDir()})
	e := event(t, "s-1", 1)
	e.Seq = 1 << 63
	if err := l.Append(testCtx(t), []messages.Envelope{e}); !errors.Is(err, eventlog.ErrInvalidEvent) {
		t.Fatalf("Append(seq 2^63) = %v, want ErrInvalidEvent", err)
	}
}

// TestSummaryMatchesEvents recomputes every session's summary from the events table
// with plain SQL after a mixed workload, and compares it with the summary table.
func TestSummaryMatchesEvents(t *testing.T) {
	dir := t.TempDir()
	l := open(t, sqlite.Config{Dir: dir})
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			id := fmt.Sprintf("m-%d", w)
			for seq := uint64(1); seq <= 30; seq += 3 {
				batch := []messages.Envelope{event(t, id, seq+2), event(t, id, seq), event(t, id, seq+1)}
				for range 2 { // redelivered
					if err := l.Append(ctx, batch); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	waitGroup(t, &wg, time.Minute)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rows, err := rawDB(t, dir).Query(`
		SELECT e.session_id, count(*), max(e.seq), min(e.ts), max(e.ts), sum(e.type = 'model.requested'),
			coalesce((SELECT type FROM events t WHERE t.session_id = e.session_id AND t.type LIKE 'task.%' ORDER BY seq DESC LIMIT 1), ''),
			sum(e.type = 'task.submitted'), sum(e.type IN ('task.completed', 'task.failed'))
		FROM events e GROUP BY e.session_id ORDER BY min(e.ts) DESC, e.session_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var want []eventlog.SessionInfo
	for rows.Next() {
		var (
			i    eventlog.SessionInfo
			last int64
			typ  string

			submitted, ended uint64
		)
		if err := rows.Scan(&i.ID, &i.Events, &last, &i.StartedUS, &i.UpdatedUS, &i.Steps, &typ, &submitted, &ended); err != nil {
			t.Fatal(err)
		}
		i.LastSeq = uint64(last)
		latest, _ := eventlog.TaskStatus(messages.Type(typ))
		i.Status = eventlog.SessionStatus(latest, submitted, ended)
		want = append(want, i)
	}
	got, err := l.Sessions(ctx, eventlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("summary table:\n%+v\nrecomputed from events:\n%+v", got, want)
	}
}

func TestCloseWritesQueuedAppends(t *testing.T) {
	dir := t.TempDir()
	l, err := sqlite.Open(testCtx(t), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	var (
		wg      sync.WaitGroup
		ok      = make([]atomic.Int64, 8)
		bad     = make(chan error, 8)
		running = make(chan struct{}, 8)
	)
	for w := range 8 {
		id := fmt.Sprintf("q-%d", w)
		events := make([]messages.Envelope, 200)
		for i := range events {
			events[i] = event(t, id, uint64(i+1))
		}
		wg.Go(func() {
			for i := range events {
				err := l.Append(ctx, events[i:i+1])
				switch {
				case err == nil:
					if ok[w].Add(1) == 10 {
						running <- struct{}{}
					}
				case errors.Is(err, eventlog.ErrClosed):
					return
				default:
					bad <- err
					return
				}
			}
		})
	}
	select { // close while the appends are in full swing
	case <-running:
	case <-time.After(time.Minute):
		t.Fatal("no writer got 10 appends through within a minute")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	waitGroup(t, &wg, time.Minute)
	close(bad)
	for err := range bad {
		t.Fatal(err)
	}
	// Every append that reported success is stored, and nothing else.
	l = open(t, sqlite.Config{Dir: dir})
	for w := range 8 {
		got, err := l.Read(ctx, fmt.Sprintf("q-%d", w), 0)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(got)) != ok[w].Load() {
			t.Fatalf("writer %d: %d appends succeeded but %d events are stored", w, ok[w].Load(), len(got))
		}
	}
}

// BenchmarkAppend measures appends of small real events, each case also on a Log
// opened with Config.Shared (suffix /shared). Compare runs with benchstat.
func BenchmarkAppend(b *testing.B) {
	for _, bc := range []struct {
		name     string
		batch    int
		parallel int // goroutines per GOMAXPROCS; 0 means sequential
	}{
		{"sequential/batch=1", 1, 0},
		{"sequential/batch=4", 4, 0},
		{"parallel=32xP/batch=1", 1, 32},
		{"parallel=32xP/batch=4", 4, 32},
	} {
		for _, shared := range []bool{false, true} {
			name := bc.name
			if shared {
				name += "/shared"
			}
			b.Run(name, func(b *testing.B) { benchmarkAppend(b, bc.batch, bc.parallel, shared) })
		}
	}
}

// benchmarkAppend measures Append of batches of batchSize events, sequential or from
// parallel goroutines per GOMAXPROCS, on a Log opened with Config.Shared or not.
func benchmarkAppend(b *testing.B, batchSize, parallel int, shared bool) {
	l := open(b, sqlite.Config{Dir: b.TempDir(), Shared: shared})
	ctx := testCtx(b)
	var sessions atomic.Int64
	templates := []messages.Envelope{event(b, "t", 1), event(b, "t", 2), event(b, "t", 3), event(b, "t", 4)}
	// events builds a batch from templates: the benchmark measures the log,
	// not JSON encoding.
	events := func(session string, seq uint64) []messages.Envelope {
		batch := make([]messages.Envelope, batchSize)
		for i := range batch {
			e := templates[(seq+uint64(i)-1)%4]
			e.SessionID, e.Seq = session, seq+uint64(i)
			e.ID = session + "/" + strconv.FormatUint(e.Seq, 10)
			batch[i] = e
		}
		return batch
	}
	b.ReportAllocs()
	b.ResetTimer()
	if parallel == 0 {
		seq := uint64(1)
		for b.Loop() {
			if err := l.Append(ctx, events("bench", seq)); err != nil {
				b.Fatal(err)
			}
			seq += uint64(batchSize)
		}
	} else {
		b.SetParallelism(parallel)
		b.RunParallel(func(pb *testing.PB) {
			session := fmt.Sprintf("bench-%d", sessions.Add(1))
			seq := uint64(1)
			for pb.Next() {
				if err := l.Append(ctx, events(session, seq)); err != nil {
					b.Error(err)
					return
				}
				seq += uint64(batchSize)
			}
		})
	}
	b.StopTimer()
	st := l.Stats()
	b.ReportMetric(float64(st.Events)/b.Elapsed().Seconds(), "events/s")
	if st.Transactions > 0 {
		b.ReportMetric(float64(st.Appends)/float64(st.Transactions), "appends/tx")
	}
}

// TestSummaryStartGoesDown appends a session's events with timestamps out of order:
// the summary's start is the earliest, whichever batch brought it, including one
// after the writer had seen the session start later.
func TestSummaryStartGoesDown(t *testing.T) {
	l := open(t, sqlite.Config{Dir: t.TempDir()})
	ctx := testCtx(t)
	base := event(t, "s", 1).TS
	for i, ts := range []int64{base + 10, base + 20, base + 5, base + 7, base + 3} {
		e := event(t, "s", uint64(i+1))
		e.TS = ts
		if err := l.Append(ctx, []messages.Envelope{e}); err != nil {
			t.Fatal(err)
		}
		got, err := l.Sessions(ctx, eventlog.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		want := min(base+10, ts)
		if i >= 2 {
			want = min(base+5, ts)
		}
		if len(got) != 1 || got[0].StartedUS != want {
			t.Fatalf("after event %d at %d: sessions %+v, want one starting at %d", i+1, ts, got, want)
		}
	}
}

// TestBatchOverStoredEvents appends batches some of whose events are stored already:
// the stored ones are skipped, the others written and counted once, and a batch with
// a conflicting event writes nothing.
func TestBatchOverStoredEvents(t *testing.T) {
	l := open(t, sqlite.Config{Dir: t.TempDir()})
	ctx := testCtx(t)
	if err := l.Append(ctx, []messages.Envelope{event(t, "s", 2)}); err != nil {
		t.Fatal(err)
	}
	var batch []messages.Envelope
	for seq := uint64(1); seq <= 6; seq++ {
		batch = append(batch, event(t, "s", seq))
	}
	if err := l.Append(ctx, batch); err != nil {
		t.Fatal(err)
	}
	moved := event(t, "s", 9)
	moved.ID = "s/1" // stored at seq 1
	if err := l.Append(ctx, []messages.Envelope{event(t, "s", 7), event(t, "s", 8), moved}); !errors.Is(err, eventlog.ErrSeqConflict) {
		t.Fatalf("append with an ID stored at another seq = %v, want ErrSeqConflict", err)
	}
	got, err := l.Read(ctx, "s", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 || got[5].Seq != 6 {
		t.Fatalf("read %d events, want seq 1 to 6", len(got))
	}
	sessions, err := l.Sessions(ctx, eventlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 1 || sessions[0].Events != 6 || sessions[0].LastSeq != 6 {
		t.Fatalf("sessions %+v, want one of 6 events up to seq 6", sessions)
	}
}
