package clickhouse_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/eventlogtest"
	"github.com/troupe-run/troupe/messages"
)

// TestConformance runs the event log suite against the real server, each log on a
// database of its own. The features are the strictest: reads see an Append as soon
// as it returns, and racing writers of one Log are detected, because one writer
// goroutine checks and inserts each group in turn (writers in different processes
// are not: see the package doc).
//
// A stale owner's writes (Features.WriteStale) are raw inserts: the rows its
// writer inserts when its fencing check passed just before a newer owner took
// the partition, which nothing in ClickHouse refuses.
func TestConformance(t *testing.T) {
	serverAddr(t)
	dbs := newLogDatabases()
	eventlogtest.Run(t, dbs.features(), func(t *testing.T) eventlog.Log {
		return dbs.add(openLog(t, clickhouse.Config{}))
	})
}

// TestConformanceTinyBuffers runs the suite with groups of one call, and a buffer
// so small that most Append calls wait for room.
func TestConformanceTinyBuffers(t *testing.T) {
	serverAddr(t)
	dbs := newLogDatabases()
	eventlogtest.Run(t, dbs.features(), func(t *testing.T) eventlog.Log {
		return dbs.add(openLog(t, clickhouse.Config{BatchSize: 1, MaxBuffered: 4, MaxBufferedBytes: 1 << 10, FlushInterval: time.Millisecond, MaxOpenConns: 2}))
	})
}

// logDatabases remembers the database of each log a conformance run opens.
type logDatabases struct {
	mu  sync.Mutex
	dbs map[eventlog.Log]string
}

func newLogDatabases() *logDatabases { return &logDatabases{dbs: map[eventlog.Log]string{}} }

func (d *logDatabases) add(l *clickhouse.Log, db string) eventlog.Log {
	d.mu.Lock()
	d.dbs[l] = db
	d.mu.Unlock()
	return l
}

func (d *logDatabases) features() eventlogtest.Features {
	return eventlogtest.Features{
		WriteStale: func(t *testing.T, l eventlog.Log, epoch uint64, events []messages.Envelope) {
			t.Helper()
			d.mu.Lock()
			db, ok := d.dbs[l]
			d.mu.Unlock()
			if !ok {
				t.Fatalf("WriteStale: log %p was not opened by this run", l)
			}
			insertRawAt(t, db, epoch, events...)
		},
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (clickhouse.Config{}).Validate(); err != nil {
		t.Fatalf("Validate(zero Config) = %v", err)
	}
	bad := clickhouse.Config{
		Addr: []string{"http://h:8123"}, Database: "no-dashes", Compression: "snappy",
		DialTimeout: -1, QueryTimeout: -1, FlushInterval: -1, CloseTimeout: -1,
		MaxOpenConns: -1, BatchSize: -1, MaxBatchBytes: -1, MaxBuffered: -1, MaxBufferedBytes: -1,
		RetryInitialBackoff: time.Second, RetryMaxBackoff: time.Millisecond,
	}
	err := bad.Validate()
	for _, field := range []string{"Addr[0]", "Database", "Compression", "DialTimeout", "QueryTimeout", "FlushInterval",
		"CloseTimeout", "MaxOpenConns", "BatchSize", "MaxBatchBytes", "MaxBuffered ", "MaxBufferedBytes", "RetryMaxBackoff"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Validate = %v, want it to name %s", err, field)
		}
	}
	d := clickhouse.Config{}.WithDefaults()
	if !slices.Equal(d.Addr, []string{clickhouse.DefaultAddr}) || d.Database != clickhouse.DefaultDatabase ||
		d.BatchSize != clickhouse.DefaultBatchSize || d.FlushInterval != clickhouse.DefaultFlushInterval ||
		d.MaxBuffered != clickhouse.DefaultMaxBuffered || d.RetryMaxBackoff != clickhouse.DefaultRetryMaxBackoff ||
		d.CloseTimeout != clickhouse.DefaultCloseTimeout || d.Logger == nil {
		t.Fatalf("WithDefaults = %+v", d)
	}
	if got := clickhouse.SplitAddr(" a:9000,, b:9000 "); !slices.Equal(got, []string{"a:9000", "b:9000"}) {
		t.Fatalf("SplitAddr = %q", got)
	}
	if _, err := clickhouse.Open(context.Background(), bad); err == nil {
		t.Fatal("Open with an invalid config succeeded")
	}
	// An address no dial can use is refused at once, not retried as a server
	// that is down.
	for _, a := range []string{"localhost", "a:b:c", "h:99999", "h:0", "h:"} {
		if err := (clickhouse.Config{Addr: []string{a}}).Validate(); err == nil || !strings.Contains(err.Error(), "Addr[0]") {
			t.Errorf("Validate(Addr %q) = %v, want it refused", a, err)
		}
	}
	for _, a := range []string{"127.0.0.1:9000", "[::1]:9000", "ch-1.example:9440", "h:clickhouse", ":9000"} {
		if err := (clickhouse.Config{Addr: []string{a}}).Validate(); err != nil {
			t.Errorf("Validate(Addr %q) = %v, want it taken", a, err)
		}
	}
}

func TestMigrations(t *testing.T) {
	ms, err := clickhouse.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != clickhouse.SchemaVersion {
		t.Fatalf("%d schema files, SchemaVersion %d", len(ms), clickhouse.SchemaVersion)
	}
	for _, m := range ms {
		for _, s := range m.Statements {
			create := strings.HasPrefix(s, "CREATE ") && strings.Contains(s, " IF NOT EXISTS ")
			drop := strings.HasPrefix(s, "DROP TABLE IF EXISTS ")
			// A backfill of aggregate states that count distinct values: applying it twice counts nothing twice.
			backfill := strings.HasPrefix(s, "INSERT INTO ") && strings.Contains(s, "uniqExactIfState(") && !strings.Contains(s, "VALUES")
			// open_tasks is a superset of the running sessions that Sessions checks
			// against their summaries: rows written twice cost rows, never a wrong list.
			backfill = backfill || strings.HasPrefix(s, "INSERT INTO open_tasks\nSELECT")
			// migrate skips an added column that exists (18.16 has no IF NOT EXISTS there).
			addColumn := strings.HasPrefix(s, "ALTER TABLE ") && strings.Contains(s, " ADD COLUMN ")
			if !(create || drop || backfill || addColumn) || strings.Contains(s, ";") {
				t.Errorf("%s: statement is not one idempotent CREATE, DROP, backfill or ALTER TABLE … ADD COLUMN: %q", m.Name, s)
			}
		}
	}
	// The summary's status follows the task.* types that eventlog.TaskStatus maps.
	var statusTypes []string
	for _, typ := range []messages.Type{messages.TypeTaskSubmitted, messages.TypeModelRequested, messages.TypeModelResponded,
		messages.TypeToolCallRequested, messages.TypeToolCallCompleted, messages.TypeTaskCompleted, messages.TypeTaskFailed} {
		if _, ok := eventlog.TaskStatus(typ); ok {
			statusTypes = append(statusTypes, fmt.Sprintf("'%s'", typ))
		}
	}
	want := "type IN (" + strings.Join(statusTypes, ", ") + ")"
	if sql := strings.Join(ms[3].Statements, "\n"); !strings.Contains(sql, want) {
		t.Errorf("%s does not list the status types as %s", ms[3].Name, want)
	}
	// The task counts follow them too: submitted, and the two that end a task.
	want = "type IN (" + strings.Join(statusTypes[1:], ", ") + ")"
	if sql := strings.Join(ms[5].Statements, "\n"); statusTypes[0] != "'task.submitted'" || !strings.Contains(sql, want) {
		t.Errorf("%s does not count %s ending tasks as %s", ms[5].Name, statusTypes, want)
	}
	// The running sessions' tables leave out the streams that were no session when
	// they were made; a prefix added since (eventlog.BusStreamPrefix) is left out
	// by the queries (eventlog.NotPrefixed), which the conformance suite checks.
	for _, p := range []string{eventlog.NotesStreamPrefix, eventlog.MemoryStreamPrefix, eventlog.KnowledgeStreamPrefix,
		eventlog.A2APushStreamPrefix, eventlog.UISignInStreamPrefix} {
		cond := fmt.Sprintf("substring(session_id, 1, %d) != '%s'", len(p), p)
		for _, stmt := range ms[7].Statements {
			if !strings.HasPrefix(stmt, "CREATE TABLE") && !strings.Contains(stmt, cond) {
				t.Errorf("%s has a statement without %s: %q", ms[7].Name, cond, stmt)
			}
		}
	}
}

// TestSchema checks what Open leaves in the database, that opening it again
// changes nothing, and that a database of a newer schema is refused.
func TestSchema(t *testing.T) {
	addr := serverAddr(t)
	conn := rawConn(t, addr)
	db := newDatabase(t, conn)
	ctx := testCtx(t, time.Minute)
	for range 2 {
		l, err := clickhouse.Open(ctx, clickhouse.Config{Addr: addr, Database: db})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	tables := queryStrings(t, conn, "SELECT name FROM system.tables WHERE database = ? ORDER BY name", db)
	if want := []string{"event_ids", "event_ids_mv", "events", "fenced_events", "fenced_events_mv", "fold_snapshots", "memory_ops", "model_usage", "open_tasks", "open_tasks_mv", "ownership", "published_marks", "releases", "schema_migrations", "session_agents", "session_outcomes", "session_summaries", "session_summaries_mv", "session_tasks", "session_tasks_mv", "sessions", "sessions_mv", "tool_usage", "write_probes"}; !slices.Equal(tables, want) {
		t.Fatalf("tables %q, want %q", tables, want)
	}
	versions := queryStrings(t, conn, "SELECT toString(version) FROM "+db+".schema_migrations FINAL ORDER BY version")
	if !slices.Equal(versions, []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17", "18"}) {
		t.Fatalf("schema_migrations holds %v", versions)
	}
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".schema_migrations (version, name, applied_us)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append(uint32(clickhouse.SchemaVersion+1), "9999_future.sql", int64(0)); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	_, err = clickhouse.Open(ctx, clickhouse.Config{Addr: addr, Database: db})
	if err == nil || !strings.Contains(err.Error(), "newer build") {
		t.Fatalf("Open(database of a newer schema) = %v, want a refusal", err)
	}
}

// version5Database returns a database of schema version 5 (before fencing),
// holding two events of session s-1, and a connection that uses it.
func version5Database(t *testing.T) (db string, in driver.Conn, old []messages.Envelope) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	db, in = databaseAt(t, ctx, serverAddr(t), 5, 0)
	old = []messages.Envelope{event(t, "s-1", 1), event(t, "s-1", 2)}
	b, err := in.PrepareBatch(ctx, "INSERT INTO events (session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload)")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range old {
		if err := b.Append(e.SessionID, e.Seq, e.ID, string(e.Type), int64(e.Version), e.CausationID, e.CorrelationID, e.TS, e.Actor, string(e.Payload)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	return db, in, old
}

// checkMigrated checks a database migrated from version 5 with l: events is sorted
// by epoch too, the old events read back under epoch 0, and owners append under
// their epochs.
func checkMigrated(t *testing.T, l *clickhouse.Log, db string, old []messages.Envelope) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	sorting := queryStrings(t, rawConn(t, serverAddr(t)), "SELECT name FROM system.columns WHERE database = ? AND table = 'events' AND is_in_sorting_key ORDER BY name", db)
	if !slices.Equal(sorting, []string{"epoch", "seq", "session_id"}) {
		t.Fatalf("events is sorted by %v, want epoch, seq and session_id", sorting)
	}
	epoch, err := l.Own(ctx, "node-a", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	next := event(t, "s-1", 3)
	if err := l.AppendLeased(ctx, eventlog.Lease{Partition: 0, Epoch: epoch}, []messages.Envelope{next}); err != nil {
		t.Fatal(err)
	}
	got, err := l.Read(ctx, "s-1", 0)
	if want := append(slices.Clone(old), next); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Read after migrating = %d events, %v; want the 2 old ones and the new one", len(got), err)
	}
}

// TestMigrateFromVersion5 opens a database of schema version 5 that holds events
// with two Logs at once, as two nodes of a cluster upgraded together would: both
// add the epoch column (or find it added), and the database works.
func TestMigrateFromVersion5(t *testing.T) {
	db, _, old := version5Database(t)
	ctx := testCtx(t, time.Minute)
	logs := make([]*clickhouse.Log, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range logs {
		wg.Go(func() {
			logs[i], errs[i] = clickhouse.Open(ctx, clickhouse.Config{Addr: serverAddr(t), Database: db, Logger: testLogger(t)})
		})
	}
	wg.Wait()
	for i, l := range logs {
		if errs[i] != nil {
			t.Fatalf("Open #%d of a version-5 database: %v", i+1, errs[i])
		}
		defer l.Close()
	}
	checkMigrated(t, logs[1], db, old)
}

// TestMigrateColumnAddedBefore: a node that added the epoch column but died
// before it recorded version 7 leaves a database that the next Open migrates
// (ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS: migrate checks).
func TestMigrateColumnAddedBefore(t *testing.T) {
	db, in, old := version5Database(t)
	ms, err := clickhouse.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Exec(testCtx(t, time.Minute), ms[6].Statements[0]); err != nil {
		t.Fatal(err)
	}
	l, _ := openLog(t, clickhouse.Config{Database: db})
	checkMigrated(t, l, db, old)
}

// queryStrings returns the one String column of a query's rows.
func queryStrings(t testing.TB, conn driver.Conn, query string, args ...any) []string {
	t.Helper()
	rows, err := conn.Query(testCtx(t, time.Minute), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// insertRaw writes rows into the events table directly, as a damaged or
// hand-edited database would hold them.
func insertRaw(t testing.TB, db string, rows ...messages.Envelope) {
	t.Helper()
	insertRawAt(t, db, 0, rows...)
}

// insertRawAt writes rows under epoch into the events table directly.
func insertRawAt(t testing.TB, db string, epoch uint64, rows ...messages.Envelope) {
	t.Helper()
	insertRows(t, db, &epoch, rows...)
}

// insertRows writes rows into the events table directly; a nil epoch leaves the
// column out, for a database of a schema before fencing.
func insertRows(t testing.TB, db string, epoch *uint64, rows ...messages.Envelope) {
	t.Helper()
	conn := rawConn(t, serverAddr(t))
	ctx := testCtx(t, time.Minute)
	cols := "session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload"
	if epoch != nil {
		cols += ", epoch"
	}
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".events ("+cols+")")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rows {
		vals := []any{e.SessionID, e.Seq, e.ID, string(e.Type), int64(e.Version), e.CausationID, e.CorrelationID, e.TS, e.Actor, string(e.Payload)}
		if epoch != nil {
			vals = append(vals, *epoch)
		}
		if err := b.Append(vals...); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptRowsAreReported(t *testing.T) {
	serverAddr(t)
	cases := []struct {
		name  string
		spoil func(e *messages.Envelope)
	}{
		{"PayloadGarbage", func(e *messages.Envelope) { e.Payload = []byte("\x00\xff\x17") }},
		{"PayloadTruncated", func(e *messages.Envelope) { e.Payload = e.Payload[:9] }},
		{"PayloadEmpty", func(e *messages.Envelope) { e.Payload = nil }},
		{"TypeEmpty", func(e *messages.Envelope) { e.Type = "" }},
		{"IDEmpty", func(e *messages.Envelope) { e.ID = "" }},
		{"TwoEventsAtOneSeq", func(e *messages.Envelope) { e.ID = "intruder" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, db := openLog(t, clickhouse.Config{})
			ctx := testCtx(t, time.Minute)
			var events []messages.Envelope
			for seq := uint64(1); seq <= 5; seq++ {
				events = append(events, event(t, "s-1", seq))
			}
			if err := l.Append(ctx, events); err != nil {
				t.Fatal(err)
			}
			bad := events[2]
			tc.spoil(&bad)
			if tc.name != "TwoEventsAtOneSeq" {
				// Replace the stored row: drop it, then insert the damaged one.
				if err := rawConn(t, serverAddr(t)).Exec(ctx, "ALTER TABLE "+db+".events DELETE WHERE session_id = 's-1' AND seq = 3"); err != nil {
					t.Fatal(err)
				}
				waitMutations(t, db)
			}
			insertRaw(t, db, bad)
			for _, from := range []uint64{0, 3} {
				got, err := l.Read(ctx, "s-1", from)
				if !errors.Is(err, messages.ErrCorrupt) {
					t.Fatalf("Read(from %d) = %d events, %v; want an error wrapping ErrCorrupt", from, len(got), err)
				}
				if msg := err.Error(); !strings.Contains(msg, "session s-1 seq 3") {
					t.Fatalf("error %q does not name session s-1 seq 3", msg)
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

// waitMutations waits until the ALTER … DELETE mutations of db's events table are done.
func waitMutations(t testing.TB, db string) {
	t.Helper()
	conn := rawConn(t, serverAddr(t))
	deadline := time.Now().Add(time.Minute)
	for {
		var pending uint64
		if err := conn.QueryRow(testCtx(t, time.Minute),
			"SELECT count() FROM system.mutations WHERE database = ? AND table = 'events' AND is_done = 0", db).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("mutations of %s.events not done after a minute", db)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRowsWrittenTwiceCollapse stores every event twice, as a retried insert whose
// first attempt did arrive leaves them, and checks that Read and Sessions count
// each once, before and after the parts merge.
func TestRowsWrittenTwiceCollapse(t *testing.T) {
	l, db := openLog(t, clickhouse.Config{})
	ctx := testCtx(t, time.Minute)
	var events []messages.Envelope
	for seq := uint64(1); seq <= 6; seq++ {
		events = append(events, event(t, "s-1", seq))
	}
	insertRaw(t, db, events...)
	insertRaw(t, db, events[2:]...)
	check := func(when string) {
		got, err := l.Read(ctx, "s-1", 0)
		if err != nil || !reflect.DeepEqual(got, events) {
			t.Fatalf("%s: Read = %d events, %v; want the 6 events once", when, len(got), err)
		}
		infos, err := l.Sessions(ctx, eventlog.Filter{})
		if err != nil || len(infos) != 1 || infos[0].Events != len(events) || infos[0].Steps != 2 || infos[0].LastSeq != uint64(len(events)) {
			t.Fatalf("%s: Sessions = %+v, %v", when, infos, err)
		}
	}
	check("before merging")
	// Appending them again is a no-op, also in a batch with a new event.
	more := append(slices.Clone(events[4:]), event(t, "s-1", 7))
	if err := l.Append(ctx, more); err != nil {
		t.Fatal(err)
	}
	events = append(events, more[2])
	check("after appending a new event")
	for _, table := range []string{"events", "event_ids", "sessions"} {
		if err := rawConn(t, serverAddr(t)).Exec(ctx, "OPTIMIZE TABLE "+db+"."+table+" FINAL"); err != nil {
			t.Fatal(err)
		}
	}
	var rows uint64
	if err := rawConn(t, serverAddr(t)).QueryRow(ctx, "SELECT count() FROM "+db+".events").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 7 {
		t.Fatalf("events holds %d rows after OPTIMIZE FINAL, want 7", rows)
	}
	check("after merging")
}

// TestTwoLogsOneDatabase shows what two nodes on one database get: conflicts
// with events the other already wrote are refused.
func TestTwoLogsOneDatabase(t *testing.T) {
	a, db := openLog(t, clickhouse.Config{})
	b, _ := openLog(t, clickhouse.Config{Database: db})
	ctx := testCtx(t, time.Minute)
	e1, e2 := event(t, "s-1", 1), event(t, "s-1", 2)
	if err := a.Append(ctx, []messages.Envelope{e1, e2}); err != nil {
		t.Fatal(err)
	}
	other := e2
	other.ID = "s-1/other"
	if err := b.Append(ctx, []messages.Envelope{event(t, "s-1", 3), other}); !errors.Is(err, eventlog.ErrSeqConflict) {
		t.Fatalf("second log: Append(a different event at a taken seq) = %v, want ErrSeqConflict", err)
	}
	moved := e1
	moved.SessionID = "s-2"
	if err := b.Append(ctx, []messages.Envelope{moved}); !errors.Is(err, eventlog.ErrSeqConflict) {
		t.Fatalf("second log: Append(a stored ID in another session) = %v, want ErrSeqConflict", err)
	}
	if err := b.Append(ctx, []messages.Envelope{e2, event(t, "s-1", 3)}); err != nil {
		t.Fatal(err)
	}
	got, err := a.Read(ctx, "s-1", 0)
	if err != nil || len(got) != 3 {
		t.Fatalf("Read = %d events, %v; want 3", len(got), err)
	}
}

// TestSessionIDsAreNotSQL appends and reads sessions whose IDs hold quotes,
// backslashes and SQL.
func TestSessionIDsAreNotSQL(t *testing.T) {
	l, _ := openLog(t, clickhouse.Config{})
	ctx := testCtx(t, time.Minute)
	for _, id := range []string{`it's`, `back\slash`, `x' OR '1'='1`, "tab\there", "ünïcödé ✓"} {
		want := []messages.Envelope{event(t, id, 1), event(t, id, 2)}
		if err := l.Append(ctx, want); err != nil {
			t.Fatalf("Append(session %q): %v", id, err)
		}
		got, err := l.Read(ctx, id, 0)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("Read(session %q) = %d events, %v", id, len(got), err)
		}
	}
	infos, err := l.Sessions(ctx, eventlog.Filter{})
	if err != nil || len(infos) != 5 {
		t.Fatalf("Sessions = %d, %v; want 5", len(infos), err)
	}
}

// TestOutageThroughProxy cuts the network between the log and the server for a
// while (a proxy goes down), with appenders running: every Append returns only
// once its events are stored, none is lost and none is stored twice.
func TestOutageThroughProxy(t *testing.T) {
	addr := serverAddr(t)
	p := newProxy(t, addr[0])
	l, db := openLog(t, clickhouse.Config{Addr: []string{p.addr}, RetryInitialBackoff: 20 * time.Millisecond,
		RetryMaxBackoff: 200 * time.Millisecond, QueryTimeout: 5 * time.Second, DialTimeout: time.Second})
	const writers, steps = 8, 60
	ctx := testCtx(t, 2*time.Minute)
	var (
		wg       sync.WaitGroup
		errs     = make(chan error, writers)
		progress = make(chan struct{}, writers*steps)
	)
	for w := range writers {
		wg.Go(func() {
			session := fmt.Sprintf("p-%d", w)
			for s := range uint64(steps) {
				batch := []messages.Envelope{event(t, session, 2*s+1), event(t, session, 2*s+2)}
				if err := l.Append(ctx, batch); err != nil {
					errs <- fmt.Errorf("session %s step %d: %w", session, s, err)
					return
				}
				progress <- struct{}{}
			}
		})
	}
	waitFor(t, progress, writers*5, 30*time.Second) // writing before the outage
	p.down()
	time.Sleep(1500 * time.Millisecond)
	stalled := l.Stats()
	p.up()
	waitGroup(t, &wg, 2*time.Minute)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if stalled.Retries == 0 || stalled.Buffered == 0 {
		t.Errorf("during the outage: %+v, want retries and buffered events", stalled)
	}
	checkExactlyOnce(t, addr, db, writers, 2*steps)
}

// checkExactlyOnce checks that sessions p-0 … p-(sessions-1) each hold seqs
// 1…perSession once, and reports how many rows were written twice.
func checkExactlyOnce(t testing.TB, addr []string, db string, sessions, perSession int) {
	t.Helper()
	conn := rawConn(t, addr)
	ctx := testCtx(t, time.Minute)
	var stats []struct {
		Session string `ch:"session_id"`
		Rows    uint64 `ch:"n"`
		IDs     uint64 `ch:"ids"`
		Seqs    uint64 `ch:"seqs"`
		MinSeq  uint64 `ch:"min_seq"`
		MaxSeq  uint64 `ch:"max_seq"`
	}
	if err := conn.Select(ctx, &stats, `SELECT session_id, count() AS n, uniqExact(id) AS ids, uniqExact(seq) AS seqs,
		min(seq) AS min_seq, max(seq) AS max_seq FROM `+db+`.events FINAL GROUP BY session_id ORDER BY session_id`); err != nil {
		t.Fatal(err)
	}
	if len(stats) != sessions {
		t.Fatalf("%d sessions stored, want %d", len(stats), sessions)
	}
	for _, s := range stats {
		if s.Rows != uint64(perSession) || s.IDs != uint64(perSession) || s.Seqs != uint64(perSession) || s.MinSeq != 1 || s.MaxSeq != uint64(perSession) {
			t.Errorf("session %s: %+v, want %d events with seqs 1…%d, each once", s.Session, s, perSession, perSession)
		}
	}
	var raw uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+db+".events").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events stored once each; %d rows before merging (rows written again after a failed attempt collapse)",
		sessions*perSession, raw)
}

func waitFor(t testing.TB, ch <-chan struct{}, n int, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for range n {
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("waited %s for %d signals", d, n)
		}
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

// TestBackpressure fills the buffer while the server is unreachable: further
// Append calls wait for room and give up with their ctx, and nothing they carried
// is written; the buffered calls are written once the server is back.
func TestBackpressure(t *testing.T) {
	addr := serverAddr(t)
	p := newProxy(t, addr[0])
	l, db := openLog(t, clickhouse.Config{Addr: []string{p.addr}, MaxBuffered: 8, RetryInitialBackoff: 20 * time.Millisecond,
		RetryMaxBackoff: 100 * time.Millisecond, QueryTimeout: 5 * time.Second, DialTimeout: time.Second})
	p.down()
	ctx := testCtx(t, time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 { // 4 calls of 2 events fill the buffer of 8
		wg.Go(func() {
			session := fmt.Sprintf("p-%d", w)
			errs <- l.Append(ctx, []messages.Envelope{event(t, session, 1), event(t, session, 2)})
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for l.Stats().Buffered < 8 {
		if time.Now().After(deadline) {
			t.Fatalf("buffer never filled: %+v", l.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err := l.Append(short, []messages.Envelope{event(t, "late", 1)})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "buffer space") {
		t.Fatalf("Append to a full buffer = %v, want a deadline error while waiting for buffer space", err)
	}
	if s := l.Stats(); s.Waits == 0 || s.Buffered != 8 {
		t.Fatalf("Stats = %+v, want waits and 8 buffered events", s)
	}
	p.up()
	waitGroup(t, &wg, time.Minute)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	checkExactlyOnce(t, addr, db, 4, 2)
	if got, err := l.Read(ctx, "late", 0); err != nil || len(got) != 0 {
		t.Fatalf("Read(late) = %d events, %v; want none", len(got), err)
	}
}

// TestCloseDuringOutage shows that Close is bounded in time while the server is
// unreachable: it fails the buffered appends with ErrClosed and says so.
func TestCloseDuringOutage(t *testing.T) {
	addr := serverAddr(t)
	p := newProxy(t, addr[0])
	conn := rawConn(t, addr)
	l, err := clickhouse.Open(testCtx(t, time.Minute), clickhouse.Config{Addr: []string{p.addr}, Database: newDatabase(t, conn), Logger: testLogger(t),
		CloseTimeout: 500 * time.Millisecond, RetryInitialBackoff: 20 * time.Millisecond, QueryTimeout: 5 * time.Second, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p.down()
	appended := make(chan error, 1)
	go func() { appended <- l.Append(context.Background(), []messages.Envelope{event(t, "s-1", 1)}) }()
	deadline := time.Now().Add(30 * time.Second)
	for l.Stats().Retries == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the writer never retried")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	err = l.Close()
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Close took %s", took)
	}
	if err == nil || !strings.Contains(err.Error(), "not written") {
		t.Errorf("Close = %v, want an error about unwritten appends", err)
	}
	select {
	case err := <-appended:
		if !errors.Is(err, eventlog.ErrClosed) {
			t.Fatalf("Append during Close = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Append still blocked after Close")
	}
	if err2 := l.Close(); (err2 == nil) != (err == nil) {
		t.Fatalf("second Close = %v, first %v", err2, err)
	}
}

// TestOpenUnreachable shows that Open keeps trying an unreachable server until its
// ctx ends, then says why it failed.
func TestOpenUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := clickhouse.Open(ctx, clickhouse.Config{Addr: []string{"127.0.0.1:1"}, DialTimeout: 100 * time.Millisecond,
		RetryInitialBackoff: 50 * time.Millisecond, Logger: testLogger(t)})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("Open(unreachable) = %v, want an error naming the address and the deadline", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("Open(unreachable) took %s", took)
	}
}

// TestIDConflicts covers the two ways an ID is found stored: canonically (the ID
// is "<session>/<seq>" of its position, found in events) and listed in event_ids
// (any other ID), each appended again at another position, in the same session
// and in another.
func TestIDConflicts(t *testing.T) {
	l, db := openLog(t, clickhouse.Config{})
	ctx := testCtx(t, time.Minute)
	canonical := event(t, "s-1", 1)
	odd := event(t, "s-1", 2)
	odd.ID = "6a1f-odd"
	misnamed := event(t, "s-1", 3)
	misnamed.ID = "s-1/4" // the canonical ID of another position
	if err := l.Append(ctx, []messages.Envelope{canonical, odd, misnamed}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		id      string
		session string
		seq     uint64
	}{
		{"CanonicalLaterSeq", canonical.ID, "s-1", 5},
		{"CanonicalOtherSession", canonical.ID, "s-2", 1},
		{"OddLaterSeq", odd.ID, "s-1", 5},
		{"OddOtherSession", odd.ID, "s-3", 9},
		{"MisnamedAtItsCanonicalPosition", misnamed.ID, "s-1", 4},
		{"MisnamedOtherSession", misnamed.ID, "s-4", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := event(t, tc.session, tc.seq)
			e.ID = tc.id
			if err := l.Append(ctx, []messages.Envelope{e}); !errors.Is(err, eventlog.ErrSeqConflict) {
				t.Fatalf("Append(%s at session %s seq %d) = %v, want ErrSeqConflict", tc.id, tc.session, tc.seq, err)
			}
		})
	}
	// Delivered again at their own positions: no-ops.
	if err := l.Append(ctx, []messages.Envelope{misnamed, odd, canonical}); err != nil {
		t.Fatal(err)
	}
	got, err := l.Read(ctx, "s-1", 0)
	if err != nil || !reflect.DeepEqual(got, []messages.Envelope{canonical, odd, misnamed}) {
		t.Fatalf("Read = %d events, %v", len(got), err)
	}
	ids := queryStrings(t, rawConn(t, serverAddr(t)), "SELECT id FROM "+db+".event_ids FINAL ORDER BY id")
	if !slices.Equal(ids, []string{odd.ID, misnamed.ID}) {
		t.Fatalf("event_ids lists %q, want the two IDs that are not canonical", ids)
	}
}

// A database of schema 5 lists a session with tasks queued behind an ended one as
// completed; Open migrates it to schema 6 and counts the tasks already stored, so
// that the session lists (and reports) as running until its last task ends.
func TestMigrationCountsQueuedTasks(t *testing.T) {
	addr := serverAddr(t)
	ctx := testCtx(t, time.Minute)
	db, old := databaseAt(t, ctx, addr, 5, time.Minute)
	// Session q: tasks 1 and 2 submitted, task 1 ended. Session done: one task, ended.
	var events []messages.Envelope
	add := func(session string, seq uint64, p messages.Payload) {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("%s/%d", session, seq), session, seq, int64(seq), "session"
		events = append(events, e)
	}
	add("q", 1, &messages.TaskSubmitted{Input: "one"})
	add("q", 2, &messages.TaskSubmitted{Input: "two"})
	add("q", 3, &messages.TaskCompleted{Output: "1"})
	add("done", 1, &messages.TaskSubmitted{Input: "one"})
	add("done", 2, &messages.TaskFailed{Reason: messages.ReasonModelError, Error: "down"})
	insertRows(t, db, nil, events...) // schema 5 has no epoch column

	l, _ := openLog(t, clickhouse.Config{Database: db})
	status := func() map[string]string {
		infos, err := l.Sessions(ctx, eventlog.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, i := range infos {
			out[i.ID] = i.Status
		}
		return out
	}
	if got := status(); got["q"] != messages.StatusRunning || got["done"] != messages.StatusFailed {
		t.Fatalf("after the migration: %v, want q running and done failed", got)
	}
	running, err := l.Sessions(ctx, eventlog.Filter{Status: messages.StatusRunning})
	if err != nil || len(running) != 1 || running[0].ID != "q" {
		t.Fatalf("running sessions after the migration: %+v, %v", running, err)
	}
	st, err := l.Report(ctx, eventlog.StatsFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Sessions) != 1 || st.Sessions[0].Running != 1 || st.Sessions[0].Failed != 1 || st.Sessions[0].Completed != 0 {
		t.Fatalf("Report sessions: %+v, want one running and one failed", st.Sessions)
	}
	var viewRunning int64
	if err := old.QueryRow(ctx, "SELECT toInt64(running) FROM "+db+".session_outcomes").Scan(&viewRunning); err != nil || viewRunning != 1 {
		t.Fatalf("session_outcomes says %d running (%v), want 1", viewRunning, err)
	}
	end, err := messages.NewEnvelope(&messages.TaskCompleted{Output: "2"})
	if err != nil {
		t.Fatal(err)
	}
	end.ID, end.SessionID, end.Seq, end.TS, end.Actor = "q/4", "q", 4, 4, "session"
	if err := l.Append(ctx, []messages.Envelope{end}); err != nil {
		t.Fatal(err)
	}
	if got := status(); got["q"] != messages.StatusCompleted {
		t.Fatalf("after the last task ended: %v, want q completed", got)
	}
}
