package clickhouse

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// logRecords gathers what a Log logs, as JSON lines.
type logRecords struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *logRecords) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(p)
}

// find returns the records whose message is msg.
func (r *logRecords) find(t *testing.T, msg string) []map[string]any {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]any
	for line := range bytes.Lines(r.buf.Bytes()) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatal(err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// settleDatabase returns the test server's address, a database of the test's
// own and a connection to it.
func settleDatabase(t *testing.T, prefix string) ([]string, string, driver.Conn) {
	t.Helper()
	addr, db := fencingDatabase(t, prefix)
	conn, err := ch.Open(&ch.Options{Addr: addr, Protocol: ch.Native})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return addr, db, conn
}

// openSettling opens a Log on db without Open's repair of summaries (the
// summaries' rewrites and their hooks are then the test's alone); it is closed
// when the test ends.
func openSettling(t *testing.T, ctx context.Context, addr []string, db string, logs *logRecords) *Log {
	t.Helper()
	cfg := Config{Addr: addr, Database: db, NoSummaryRepair: true}
	if logs != nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	}
	l, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// appendStream appends events 1..n of stream.
func appendStream(t *testing.T, ctx context.Context, l *Log, stream string, n int) {
	t.Helper()
	var events []messages.Envelope
	for seq := range uint64(n) {
		events = append(events, streamEvent(t, stream, seq+1, &messages.TaskSubmitted{Input: "x"}))
	}
	if err := l.Append(ctx, events); err != nil {
		t.Fatal(err)
	}
}

// stickMutations asks for a mutation of event_ids that ClickHouse cannot do
// and retries for ever (is_done stays 0), so that every wait for the
// mutations of events and event_ids waits until unstickMutations.
func stickMutations(t *testing.T, ctx context.Context, conn driver.Conn, db string) {
	t.Helper()
	if err := conn.Exec(ctx, "INSERT INTO "+db+".event_ids SELECT 'poison', 'poison', toUInt64(0)"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "ALTER TABLE "+db+".event_ids DELETE WHERE throwIf(id = 'poison') = 1"); err != nil {
		t.Fatal(err)
	}
}

// unstickMutations removes the parts the stuck mutation fails on: it is done.
func unstickMutations(t *testing.T, ctx context.Context, conn driver.Conn, db string) {
	t.Helper()
	if err := conn.Exec(ctx, "TRUNCATE TABLE "+db+".event_ids"); err != nil {
		t.Fatal(err)
	}
}

// settled waits until no background repair of summaries runs (settles).
func settled(t *testing.T, l *Log) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		l.settles.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("the background repairs of summaries still run a minute on")
	}
}

// summaryRewrites counts the deletions of stream's summary asked for.
func summaryRewrites(t *testing.T, ctx context.Context, conn driver.Conn, db, stream string) uint64 {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.mutations WHERE database = ? AND table = 'sessions' AND position(command, ?) > 0",
		db, "'"+stream+"'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// summaryEvents returns the rows of stream's summary in table sessions and the
// events they count, once the mutations of sessions are done.
func summaryEvents(t *testing.T, ctx context.Context, conn driver.Conn, db, stream string) (rows, events uint64) {
	t.Helper()
	for {
		var left uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.mutations WHERE database = ? AND table = 'sessions' AND is_done = 0", db).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the mutations of sessions are not done")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := conn.QueryRow(ctx, "SELECT count(), uniqExactMerge(events) FROM "+db+".sessions WHERE session_id = ?", stream).Scan(&rows, &events); err != nil {
		t.Fatal(err)
	}
	return rows, events
}

// A stream whose compaction failed again and again while the mutations went
// on (each write of a knowledge base that compacts, timing out) is settled
// once, by one background worker, not by one goroutine per failure each
// deleting and writing its summary anew.
func TestSettleLaterSettlesAStreamQueuedTwiceOnce(t *testing.T) {
	addr, db, conn := settleDatabase(t, "settleonce")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := openSettling(t, ctx, addr, db, nil)
	a, b := eventlog.KnowledgeStreamPrefix+"a", eventlog.KnowledgeStreamPrefix+"b"
	appendStream(t, ctx, l, a, 3)
	appendStream(t, ctx, l, b, 2)
	stickMutations(t, ctx, conn, db)
	for range 5 {
		l.settleLater(a)
	}
	l.settleLater(b)
	unstickMutations(t, ctx, conn, db)
	settled(t, l)
	for stream, events := range map[string]uint64{a: 3, b: 2} {
		if n := summaryRewrites(t, ctx, conn, db, stream); n != 1 {
			t.Errorf("the summary of %s was written anew %d times, want once", stream, n)
		}
		if rows, got := summaryEvents(t, ctx, conn, db, stream); rows == 0 || got != events {
			t.Errorf("the summary of %s counts %d events in %d rows, want %d", stream, got, rows, events)
		}
	}
}

// A mutation ClickHouse cannot do stays undone for ever: the settlement of
// the summaries waiting for it gives up after settleWait, says so and ends
// (Open's repair settles them later), instead of polling until Close. A
// stream queued after it gave up is settled by a new worker.
func TestSettleLaterGivesUpOnAMutationThatNeverEnds(t *testing.T) {
	addr, db, conn := settleDatabase(t, "settlestuck")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logs := &logRecords{}
	l := openSettling(t, ctx, addr, db, logs)
	l.settleWait = 300 * time.Millisecond
	a := eventlog.KnowledgeStreamPrefix + "a"
	appendStream(t, ctx, l, a, 3)
	stickMutations(t, ctx, conn, db)
	l.settleLater(a)
	settled(t, l)
	gaveUp := logs.find(t, "eventlog/clickhouse: gave up writing anew the summaries of compacted streams: they count their deleted events until the log is opened again (Open repairs them)")
	if len(gaveUp) != 1 || !slices.Equal(gaveUp[0]["streams"].([]any), []any{a}) {
		t.Fatalf("logged %v; want that the settlement of %s gave up", gaveUp, a)
	}
	if n := summaryRewrites(t, ctx, conn, db, a); n != 0 {
		t.Fatalf("the summary of %s was written anew %d times while the mutation was not done", a, n)
	}

	unstickMutations(t, ctx, conn, db)
	l.settleLater(a)
	settled(t, l)
	if n := summaryRewrites(t, ctx, conn, db, a); n != 1 {
		t.Fatalf("the summary of %s was written anew %d times once the mutation was done, want once", a, n)
	}
}

// Close while a summary is being written anew (between the deletion of the
// stale one and the insertion of the new one) waits for the insertion: cut
// there, the stream would have no summary, and the listings of the knowledge
// bases would miss it until the log is opened again.
func TestCloseWaitsForTheSummaryRewriteUnderWay(t *testing.T) {
	addr, db, conn := settleDatabase(t, "settleclose")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := openSettling(t, ctx, addr, db, nil)
	a := eventlog.KnowledgeStreamPrefix + "a"
	appendStream(t, ctx, l, a, 3)
	closed := make(chan error, 1)
	l.betweenSummary = func(string) {
		go func() { closed <- l.Close() }()
		select { // Close stops the background work
		case <-l.repairCtx.Done():
		case <-ctx.Done():
			t.Error("Close does not stop the background repairs")
		}
	}
	l.settleLater(a)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Close does not return")
	}
	if rows, events := summaryEvents(t, ctx, conn, db, a); rows == 0 || events != 3 {
		t.Fatalf("after Close, the summary of %s counts %d events in %d rows; want 3 events", a, events, rows)
	}
}

// A Log opened with NoSummaryRepair (replay's read-only commands) leaves the
// stale summaries of compacted streams to the nodes' Open, which repairs them.
func TestOpenWithNoSummaryRepairLeavesStaleSummaries(t *testing.T) {
	addr, db, conn := settleDatabase(t, "norepair")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := eventlog.KnowledgeStreamPrefix + "a"
	w := openSettling(t, ctx, addr, db, nil)
	appendStream(t, ctx, w, a, 3)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// A process died between the summary's deletion and its insertion.
	if err := conn.Exec(ctx, "ALTER TABLE "+db+".sessions DELETE WHERE session_id = ?", a); err != nil {
		t.Fatal(err)
	}
	if rows, _ := summaryEvents(t, ctx, conn, db, a); rows != 0 {
		t.Fatalf("%d rows of the summary of %s left after its deletion", rows, a)
	}

	r := openSettling(t, ctx, addr, db, nil)
	settled(t, r)
	if rows, _ := summaryEvents(t, ctx, conn, db, a); rows != 0 {
		t.Fatalf("a Log opened with NoSummaryRepair wrote the summary of %s anew", a)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	n, err := Open(ctx, Config{Addr: addr, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	settled(t, n)
	if rows, events := summaryEvents(t, ctx, conn, db, a); rows == 0 || events != 3 {
		t.Fatalf("after Open, the summary of %s counts %d events in %d rows; want 3 events", a, events, rows)
	}
}

// So does Close while a compaction (DeleteEvents) writes its stream's summary
// anew: it waits for the insertion rather than closing the connections under
// it.
func TestCloseWaitsForTheSummaryRewriteOfACompaction(t *testing.T) {
	addr, db, conn := settleDatabase(t, "compactclose")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := openSettling(t, ctx, addr, db, nil)
	a := eventlog.KnowledgeStreamPrefix + "a"
	appendStream(t, ctx, l, a, 5)
	closed := make(chan error, 1)
	l.betweenSummary = func(string) {
		go func() { closed <- l.Close() }()
		select { // Close stops the background work
		case <-l.repairCtx.Done():
		case <-ctx.Done():
			t.Error("Close does not stop the background repairs")
		}
		select { // and returns, unless it waits for this rewrite
		case <-l.gone:
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Its wait for the deletion of the stale summary may end with Close.
	if _, err := l.DeleteEvents(ctx, a, []uint64{1, 2}); err != nil {
		t.Logf("DeleteEvents: %v", err)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Close does not return")
	}
	if rows, events := summaryEvents(t, ctx, conn, db, a); rows == 0 || events != 3 {
		t.Fatalf("after Close, the summary of %s counts %d events in %d rows; want 3 events", a, events, rows)
	}
}

// A stream queued after the worker last found no mutation under way, but
// before it took the streams queued, had its mutations asked for meanwhile:
// the worker waits for them too before it writes the summaries anew (here
// they never end, and it gives up), instead of writing a summary that counts
// the events they delete.
func TestSettleLaterWaitsForTheMutationsOfAStreamQueuedLate(t *testing.T) {
	addr, db, conn := settleDatabase(t, "settlelate")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logs := &logRecords{}
	l := openSettling(t, ctx, addr, db, logs)
	l.settleWait = 300 * time.Millisecond
	a, b := eventlog.KnowledgeStreamPrefix+"a", eventlog.KnowledgeStreamPrefix+"b"
	appendStream(t, ctx, l, a, 3)
	appendStream(t, ctx, l, b, 2)
	var once sync.Once
	l.beforeTake = func() {
		once.Do(func() {
			// b's compaction asks for its mutations, fails, and leaves b's
			// summary to the worker.
			for _, q := range []string{
				"INSERT INTO " + db + ".event_ids SELECT 'poison', 'poison', toUInt64(0)",
				"ALTER TABLE " + db + ".event_ids DELETE WHERE throwIf(id = 'poison') = 1",
			} {
				if err := conn.Exec(ctx, q); err != nil {
					t.Error(err)
				}
			}
			l.settleLater(b)
		})
	}
	l.settleLater(a)
	settled(t, l)
	gaveUp := logs.find(t, "eventlog/clickhouse: gave up writing anew the summaries of compacted streams: they count their deleted events until the log is opened again (Open repairs them)")
	if len(gaveUp) != 1 || !slices.Equal(gaveUp[0]["streams"].([]any), []any{a, b}) {
		t.Fatalf("logged %v; want that the settlement of %s and %s gave up", gaveUp, a, b)
	}
	for _, stream := range []string{a, b} {
		if n := summaryRewrites(t, ctx, conn, db, stream); n != 0 {
			t.Errorf("the summary of %s was written anew %d times while a mutation was not done", stream, n)
		}
	}
}
