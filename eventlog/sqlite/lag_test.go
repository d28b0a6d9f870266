package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/internal/smalldisk"
	"github.com/troupe-run/troupe/messages"
)

// typed is testEvent of session at seq, of type typ, stamped ts.
func typed(t *testing.T, session string, seq uint64, typ messages.Type, ts int64) messages.Envelope {
	t.Helper()
	e := testEvent(t, session, seq, "session")
	e.Type, e.TS = typ, ts
	return e
}

// lagLog opens a log on dir whose writer a test can hold (deferredGroup).
func lagLog(ctx context.Context, t *testing.T, dir string) (*Log, *heldWriter) {
	t.Helper()
	h := &heldWriter{t: t}
	l, err := open(ctx, Config{Dir: dir}, h.hook)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, h
}

// deferredGroup appends batches as one group of the writer's, which defers its
// summaries (several appends queued at once): it holds the writer at an append of
// a stream of its own (name), queues the batches behind it, and lets it go.
func deferredGroup(ctx context.Context, t *testing.T, l *Log, h *heldWriter, name string, batches ...[]messages.Envelope) {
	t.Helper()
	release := h.hold()
	first := make(chan error, 1)
	go func() {
		first <- l.Append(ctx, []messages.Envelope{typed(t, name, 1, messages.TypeToolCallCompleted, 1)})
	}()
	h.waitHeld()
	errs := make([]error, len(batches))
	var wg sync.WaitGroup
	for i, b := range batches {
		wg.Go(func() { errs[i] = l.Append(ctx, b) })
	}
	waitQueued(t, l, len(batches))
	release()
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
}

// lagBatches are the batches of four sessions: a task submitted and a step each,
// then the ends of two of them, one failed.
func lagBatches(t *testing.T) (starts, ends [][]messages.Envelope) {
	for i := range 4 {
		s := fmt.Sprintf("lag-%d", i)
		starts = append(starts, []messages.Envelope{
			typed(t, s, 1, messages.TypeTaskSubmitted, 100+int64(i)),
			typed(t, s, 2, messages.TypeModelRequested, 200+int64(i)),
		})
	}
	ends = [][]messages.Envelope{
		{typed(t, "lag-0", 3, messages.TypeModelResponded, 300), typed(t, "lag-0", 4, messages.TypeTaskCompleted, 310)},
		{typed(t, "lag-1", 3, messages.TypeTaskFailed, 320)},
	}
	return starts, ends
}

// laggingLog opens a log on dir and appends the starts of lagBatches as one group
// whose summaries lag, which it checks: a test of a lag where none is proves
// nothing.
func laggingLog(ctx context.Context, t *testing.T, dir string) *Log {
	t.Helper()
	l, h := lagLog(ctx, t, dir)
	starts, _ := lagBatches(t)
	deferredGroup(ctx, t, l, h, "held", starts...)
	if !l.lagging.Load() {
		t.Fatal("the summaries of a group of appends do not lag: the test proves nothing")
	}
	return l
}

// wantSummaries are the summaries of the streams the batches leave, as a log
// that writes them one at a time (no group, no lag) lists them.
func wantSummaries(ctx context.Context, t *testing.T, batches ...[]messages.Envelope) []eventlog.SessionInfo {
	t.Helper()
	l, err := Open(ctx, Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, b := range batches {
		if err := l.Append(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	infos, err := l.Sessions(ctx, eventlog.Filter{Prefix: "lag-"})
	if err != nil {
		t.Fatal(err)
	}
	return infos
}

func sameSummaries(t *testing.T, what string, got, want []eventlog.SessionInfo) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s:\n got  %+v\n want %+v", what, got, want)
	}
}

// crashCopy copies the database files of the log in dir, as a process killed now
// leaves them (the WAL holds the commits), to a new directory.
func crashCopy(t *testing.T, dir string) string {
	t.Helper()
	to := t.TempDir()
	for _, name := range []string{dbFile, dbFile + "-wal"} {
		src, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.Create(filepath.Join(to, name))
		if err == nil {
			_, err = io.Copy(dst, src)
		}
		src.Close()
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return to
}

// rawSummaries reads, without a Log, the summary rows of the lag- sessions in the
// database in dir, and the record of the rows that lag.
func rawSummaries(ctx context.Context, t *testing.T, dir string) (rows map[string][2]int64, lagRecords int) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(dir, dbFile)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rs, err := db.QueryContext(ctx, `SELECT session_id, events, last_seq FROM sessions WHERE session_id LIKE 'lag-%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	rows = map[string][2]int64{}
	for rs.Next() {
		var id string
		var events, last int64
		if err := rs.Scan(&id, &events, &last); err != nil {
			t.Fatal(err)
		}
		rows[id] = [2]int64{events, last}
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM summary_lag`).Scan(&lagRecords); err != nil {
		t.Fatal(err)
	}
	return rows, lagRecords
}

// TestSummariesThatLagAreRebuiltAfterACrash appends under load (groups of several
// appends), so that the summary rows lag, and takes the database files as a crash
// leaves them: the rows lag there, with the record of the lag. Open rebuilds them
// from the events before anything reads them: Sessions lists what a log that
// never deferred lists, and the record is gone.
func TestSummariesThatLagAreRebuiltAfterACrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	l, h := lagLog(ctx, t, dir)
	// The first session's rows are written before the lag starts: the rebuild
	// must leave rows that did not lag as they are.
	if err := l.Append(ctx, []messages.Envelope{typed(t, "lag-before", 1, messages.TypeTaskSubmitted, 50)}); err != nil {
		t.Fatal(err)
	}
	starts, ends := lagBatches(t)
	deferredGroup(ctx, t, l, h, "held-1", starts...)
	deferredGroup(ctx, t, l, h, "held-2", ends...)
	if !l.lagging.Load() {
		t.Fatal("the summaries of two groups of appends do not lag: the test proves nothing")
	}
	crashed := crashCopy(t, dir)

	rows, records := rawSummaries(ctx, t, crashed)
	if records != 1 {
		t.Fatalf("the crashed log holds %d records of summaries that lag, want 1", records)
	}
	// The held append of the second group, alone in its own, wrote the rows of
	// the first: those of the second lag.
	if rows["lag-0"] != [2]int64{2, 2} || rows["lag-1"] != [2]int64{2, 2} {
		t.Fatalf("the crashed log holds the summaries of lag-0 and lag-1 as %v and %v, want them lagging at 2 events",
			rows["lag-0"], rows["lag-1"])
	}

	want := wantSummaries(ctx, t, slices.Concat([][]messages.Envelope{{typed(t, "lag-before", 1, messages.TypeTaskSubmitted, 50)}}, starts, ends)...)

	// A read-only Log (replay's, before the node starts again) lists the rows
	// that lag rebuilt, through every filter, and leaves the file as it is.
	ro, err := Open(ctx, Config{Dir: crashed, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ro.Sessions(ctx, eventlog.Filter{Prefix: "lag-"})
	if err != nil {
		t.Fatal(err)
	}
	sameSummaries(t, "read-only Sessions after a crash with summaries that lag", got, want)
	var completed []eventlog.SessionInfo
	for _, i := range want {
		if i.Status == messages.StatusCompleted {
			completed = append(completed, i)
		}
	}
	got, err = ro.Sessions(ctx, eventlog.Filter{Prefix: "lag-", Status: messages.StatusCompleted})
	if err != nil {
		t.Fatal(err)
	}
	sameSummaries(t, "read-only Sessions of the completed ones", got, completed)
	got, err = ro.Sessions(ctx, eventlog.Filter{Prefix: "lag-", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	sameSummaries(t, "read-only Sessions, two of them", got, want[:2])
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if _, records := rawSummaries(ctx, t, crashed); records != 1 {
		t.Fatalf("a read-only Log changed the record of summaries that lag: %d records", records)
	}

	reopened, err := Open(ctx, Config{Dir: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	got, err = reopened.Sessions(ctx, eventlog.Filter{Prefix: "lag-"})
	if err != nil {
		t.Fatal(err)
	}
	sameSummaries(t, "Sessions after a crash with summaries that lag", got, want)
	if _, records := rawSummaries(ctx, t, crashed); records != 0 {
		t.Fatalf("after the rebuild the log holds %d records of summaries that lag, want 0", records)
	}
}

// TestSessionsSeesSummariesThatLag: this process's Sessions sees every append
// that returned, whether its summary rows lag or not; and rows that lag are
// written within maxLagAge even if nothing more is written or read, for the
// readers of other processes.
func TestSessionsSeesSummariesThatLag(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	l, h := lagLog(ctx, t, dir)
	starts, ends := lagBatches(t)
	deferredGroup(ctx, t, l, h, "held-1", starts...)
	deferredGroup(ctx, t, l, h, "held-2", ends...)
	want := wantSummaries(ctx, t, slices.Concat(starts, ends)...)

	// Another process's reader sees them within maxLagAge.
	deadline := time.Now().Add(time.Minute)
	for {
		rows, records := rawSummaries(ctx, t, dir)
		if len(rows) == len(want) && rows["lag-0"] == [2]int64{4, 4} && records == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the appends the summary rows still lag: %v, %d records", rows, records)
		}
		time.Sleep(10 * time.Millisecond)
	}

	deferredGroup(ctx, t, l, h, "held-3",
		[]messages.Envelope{typed(t, "lag-2", 3, messages.TypeTaskCompleted, 400)},
		[]messages.Envelope{typed(t, "lag-3", 3, messages.TypeModelResponded, 410)})
	if !l.lagging.Load() {
		t.Fatal("the summaries of a group of appends do not lag: the test proves nothing")
	}
	got, err := l.Sessions(ctx, eventlog.Filter{Prefix: "lag-"})
	if err != nil {
		t.Fatal(err)
	}
	want = wantSummaries(ctx, t, slices.Concat(starts, ends, [][]messages.Envelope{
		{typed(t, "lag-2", 3, messages.TypeTaskCompleted, 400)},
		{typed(t, "lag-3", 3, messages.TypeModelResponded, 410)},
	})...)
	sameSummaries(t, "Sessions while summaries lag", got, want)
}

// TestPruneWritesSummariesThatLagFirst: a stream whose row says it was last
// written before the prune's bound, but whose later append's row lags, is not
// pruned: its events, the later one too, stay.
func TestPruneWritesSummariesThatLagFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, h := lagLog(ctx, t, t.TempDir())
	stream := messages.BusStreamPrefix + "lag"
	if err := l.Append(ctx, []messages.Envelope{typed(t, stream, 1, messages.TypeToolCallCompleted, 1_000)}); err != nil {
		t.Fatal(err)
	}
	deferredGroup(ctx, t, l, h, "held",
		[]messages.Envelope{typed(t, stream, 2, messages.TypeToolCallCompleted, 5_000)},
		[]messages.Envelope{typed(t, "lag-other", 1, messages.TypeToolCallCompleted, 5_000)})
	if !l.lagging.Load() {
		t.Fatal("the summaries of a group of appends do not lag: the test proves nothing")
	}
	n, err := l.PruneStreams(ctx, messages.BusStreamPrefix, 3_000, 100)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("PruneStreams pruned %d streams, want 0: the stream was written at 5,000, after the bound", n)
	}
	if got, err := l.Read(ctx, stream, 0); err != nil || len(got) != 2 {
		t.Fatalf("Read of the stream after the prune = %d events, %v; want 2", len(got), err)
	}
}

// TestCloseWritesSummariesThatLag: a Log closed cleanly leaves its summary rows
// written and no record of a lag for the next Open to rebuild.
func TestCloseWritesSummariesThatLag(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	l := laggingLog(ctx, t, dir)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rows, records := rawSummaries(ctx, t, dir)
	if records != 0 || len(rows) != 4 || rows["lag-3"] != [2]int64{2, 2} {
		t.Fatalf("after Close: rows %v, %d records of summaries that lag; want 4 rows of 2 events and no record", rows, records)
	}
}

// TestRefusedAppendLeavesNoSummaryInALaggingGroup: a batch of a group that
// defers its summaries, refused (a position taken), adds nothing to any row.
func TestRefusedAppendLeavesNoSummaryInALaggingGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, h := lagLog(ctx, t, t.TempDir())
	if err := l.Append(ctx, []messages.Envelope{typed(t, "lag-taken", 1, messages.TypeTaskSubmitted, 10)}); err != nil {
		t.Fatal(err)
	}
	good := []messages.Envelope{typed(t, "lag-good", 1, messages.TypeTaskSubmitted, 20)}
	bad := []messages.Envelope{typed(t, "lag-bad", 1, messages.TypeTaskSubmitted, 30), typed(t, "lag-taken", 1, messages.TypeTaskCompleted, 30)}
	bad[1].ID = "another-id"
	release := h.hold()
	first := make(chan error, 1)
	go func() {
		first <- l.Append(ctx, []messages.Envelope{typed(t, "held", 1, messages.TypeToolCallCompleted, 1)})
	}()
	h.waitHeld()
	errs := make(chan error, 2)
	go func() { errs <- l.Append(ctx, good) }()
	go func() { errs <- l.Append(ctx, bad) }()
	waitQueued(t, l, 2)
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	conflicts := 0
	for range 2 {
		switch err := <-errs; {
		case err == nil:
		case errors.Is(err, eventlog.ErrSeqConflict):
			conflicts++
		default:
			t.Fatal(err)
		}
	}
	if conflicts != 1 {
		t.Fatalf("%d appends refused, want 1", conflicts)
	}
	got, err := l.Sessions(ctx, eventlog.Filter{Prefix: "lag-"})
	if err != nil {
		t.Fatal(err)
	}
	sameSummaries(t, "Sessions after a refused append", got, wantSummaries(ctx, t,
		[]messages.Envelope{typed(t, "lag-taken", 1, messages.TypeTaskSubmitted, 10)}, good))
}

// TestSessionsOnAFullDiskWhileSummariesLag: with rows lagging and the disk full,
// this process's writer cannot write them, and Sessions lists them rebuilt from
// the events instead of failing (a full disk stops writes, not listings: the
// dashboard, the node's resume listings).
func TestSessionsOnAFullDiskWhileSummariesLag(t *testing.T) {
	disk := smalldisk.Mount(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, h := lagLog(ctx, t, filepath.Join(disk, "data"))
	var batches [][]messages.Envelope
	for i := range 200 {
		s := fmt.Sprintf("lag-%03d", i)
		batches = append(batches, []messages.Envelope{typed(t, s, 1, messages.TypeTaskSubmitted, 100+int64(i)), typed(t, s, 2, messages.TypeModelRequested, 300+int64(i))})
	}
	deferredGroup(ctx, t, l, h, "held", batches...)
	free := smalldisk.Fill(t, disk)
	if !l.lagging.Load() {
		t.Fatal("the summaries of a group of appends were written before the disk filled: the test proves nothing")
	}
	got, err := l.Sessions(ctx, eventlog.Filter{Prefix: "lag-"})
	if err != nil {
		t.Fatalf("Sessions on a full disk while summaries lag: %v", err)
	}
	free()
	sameSummaries(t, "Sessions on a full disk while summaries lag", got, wantSummaries(ctx, t, batches...))
}

// TestRebuiltSummaryOfACompactedStream: the rebuilt row of a knowledge stream
// whose first events were deleted (DeleteEvents) is the row the writer keeps,
// which still counts from the deleted events' start, not a recount of the events
// left.
func TestRebuiltSummaryOfACompactedStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	l, h := lagLog(ctx, t, dir)
	stream := eventlog.KnowledgeStreamPrefix + "lag"
	for seq := uint64(1); seq <= 3; seq++ {
		if err := l.Append(ctx, []messages.Envelope{typed(t, stream, seq, messages.TypeToolCallCompleted, int64(seq)*10)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.DeleteEvents(ctx, stream, []uint64{1}); err != nil {
		t.Fatal(err)
	}
	deferredGroup(ctx, t, l, h, "held",
		[]messages.Envelope{typed(t, stream, 4, messages.TypeToolCallCompleted, 40)},
		[]messages.Envelope{typed(t, "lag-other", 1, messages.TypeToolCallCompleted, 40)})
	if !l.lagging.Load() {
		t.Fatal("the summaries of a group of appends do not lag: the test proves nothing")
	}
	crashed := crashCopy(t, dir)
	want, err := l.Sessions(ctx, eventlog.Filter{Prefix: stream})
	if err != nil || len(want) != 1 || want[0].StartedUS != 10 || want[0].Events != 3 {
		t.Fatalf("the live log lists %+v, %v; want the stream started at 10 with 3 events", want, err)
	}
	ro, err := Open(ctx, Config{Dir: crashed, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ro.Sessions(ctx, eventlog.Filter{Prefix: stream})
	ro.Close()
	if err != nil {
		t.Fatal(err)
	}
	sameSummaries(t, "read-only Sessions of a compacted stream whose row lags", got, want)
	reopened, err := Open(ctx, Config{Dir: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	got, err = reopened.Sessions(ctx, eventlog.Filter{Prefix: stream})
	if err != nil {
		t.Fatal(err)
	}
	sameSummaries(t, "Sessions of a compacted stream rebuilt after a crash", got, want)
}

// TestNewerBuildsLogIsNotRepaired: a log a newer build wrote, with rows that lag,
// is refused by Open as before, untouched: its record and rows stay for the
// newer build, whose summaries this build does not know.
func TestNewerBuildsLogIsNotRepaired(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	laggingLog(ctx, t, dir)
	crashed := crashCopy(t, dir)
	db, err := sql.Open("sqlite", filepath.Join(crashed, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(ctx, Config{Dir: crashed}); err == nil || !strings.Contains(err.Error(), "run a newer build") {
		t.Fatalf("Open of a newer build's log = %v, want the refusal naming a newer build", err)
	}
	if rows, records := rawSummaries(ctx, t, crashed); records != 1 || len(rows) != 0 {
		t.Fatalf("Open refused a newer build's log but changed it: rows %v, %d records of summaries that lag", rows, records)
	}
}
