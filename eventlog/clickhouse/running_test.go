package clickhouse_test

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/messages"
)

// streamEvents are the events of a stream of the running-sessions tests: an
// ended session (a task submitted and completed), a running one (a task
// submitted), or an ended dashboard sign-in (signed in, then out).
func streamEvents(t testing.TB, session string, kind string) []messages.Envelope {
	t.Helper()
	var ps []messages.Payload
	switch kind {
	case "ended":
		ps = []messages.Payload{&messages.TaskSubmitted{Input: "x"}, &messages.ModelRequested{Key: session + "/m2", Model: "offline", Step: 1},
			&messages.ModelResponded{Key: session + "/m2", Model: "offline", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "y"}},
			&messages.TaskCompleted{Output: "y"}}
	case "running":
		ps = []messages.Payload{&messages.TaskSubmitted{Input: "x"}}
	case "signin":
		ps = []messages.Payload{&messages.UISignedIn{TokenMAC: "00", CSRFHash: "00", ExpiresUS: 1}, &messages.UISignedOut{Reason: "logout"}}
	}
	out := make([]messages.Envelope, len(ps))
	for i, p := range ps {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("%s/%d", session, i+1), session, uint64(i+1), 1_767_225_600_000_000+int64(i), "session"
		e.CorrelationID = session + "/1" // the task's, as a session actor writes it
		out[i] = e
	}
	return out
}

// The names of the ended and of the running sessions of fillStreams: a running
// session sorts among ended ones, 100 apart, as random IDs would spread them.
func endedName(i int) string   { return fmt.Sprintf("s%07d-ended", i) }
func runningName(i int) string { return fmt.Sprintf("s%07d-running", 100*i) }

// fillStreams appends running sessions, and ended sessions and ended sign-ins,
// in large batches.
func fillStreams(t testing.TB, l *clickhouse.Log, running, ended, signIns int) {
	t.Helper()
	ctx := testCtx(t, 5*time.Minute)
	var batch []messages.Envelope
	flush := func() {
		if err := l.Append(ctx, batch); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	add := func(n int, kind string, name func(i int) string) {
		for i := range n {
			batch = append(batch, streamEvents(t, name(i), kind)...)
			if len(batch) >= 4000 {
				flush()
			}
		}
	}
	add(ended, "ended", endedName)
	add(signIns, "signin", func(i int) string { return fmt.Sprintf("%s%064x", eventlog.UISignInStreamPrefix, i) })
	add(running, "running", runningName)
	if len(batch) > 0 {
		flush()
	}
}

// The running sessions (Filter{Status: running, SessionsOnly: true}, the listing of
// every node start, partition assignment and list of pending approvals) are found
// without reading the summaries of the ended sessions nor the streams that are no
// session: the rows the listing reads stay below the number of ended streams. The
// listing is the one the general statement makes.
func TestRunningSessionsReadOnlyTheirRows(t *testing.T) {
	l, db := openLog(t, clickhouse.Config{})
	ctx := testCtx(t, 5*time.Minute)
	const running, ended, signIns = 10, 3000, 3000
	fillStreams(t, l, running, ended, signIns)
	// Streams the index-free listing must still get right: a session with its
	// tasks queued behind an ended one, a child, a session with no task.* event,
	// and a notes stream (no session).
	var more []messages.Envelope
	queued := streamEvents(t, "queued", "ended")
	again := streamEvents(t, "queued", "running")[0]
	again.ID, again.Seq = "queued/5", 5
	more = append(more, append(queued, again)...)
	child := streamEvents(t, "child", "running")[0]
	child.Payload = []byte(fmt.Sprintf(`{"input":"x","parent":{"session_id":%q,"seq":1}}`, runningName(1)))
	more = append(more, child)
	bare := streamEvents(t, "bare", "ended")[1]
	bare.ID, bare.Seq = "bare/1", 1
	more = append(more, bare)
	notes := streamEvents(t, eventlog.NotesStreamPrefix+"agent", "ended")[1]
	notes.ID, notes.Seq = eventlog.NotesStreamPrefix+"agent/1", 1
	more = append(more, notes)
	if err := l.Append(ctx, more); err != nil {
		t.Fatal(err)
	}
	// Write the running sessions' events once more, as a retried insert does: rows
	// of not merged parts are counted once.
	if err := l.Append(ctx, streamEvents(t, runningName(2), "running")); err != nil {
		t.Fatal(err)
	}

	// As in a log that has run a while: the parts merged, the rows of the ended
	// tasks gone.
	optimize(t, db, "open_tasks", "session_summaries")
	var read atomic.Uint64
	pctx := ch.Context(ctx, ch.WithProgress(func(p *ch.Progress) { read.Add(p.Rows) }))
	got, err := l.Sessions(pctx, eventlog.Filter{Status: messages.StatusRunning, SessionsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	rows := read.Load()
	all, err := l.Sessions(ctx, eventlog.Filter{SessionsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	want := slices.DeleteFunc(all, func(s eventlog.SessionInfo) bool { return s.Status != messages.StatusRunning })
	if len(got) != running+3 || !slices.Equal(got, want) {
		t.Fatalf("running sessions (%d):\n%+v\nthe general listing's (%d):\n%+v", len(got), got, len(want), want)
	}
	if i := slices.IndexFunc(got, func(s eventlog.SessionInfo) bool { return s.ID == "child" }); i < 0 || got[i].Parent != runningName(1) {
		t.Fatalf("the child is not listed with its parent: %+v", got)
	}
	t.Logf("database %s: the running sessions' listing read %d rows", db, rows)
	if rows >= ended {
		t.Fatalf("listing %d running sessions read %d rows, with %d ended sessions and %d ended sign-ins in the log: want fewer than %d",
			len(got), rows, ended, signIns, ended)
	}
}

// BenchmarkRunningSessions lists 100 running sessions, alone and beside 10,000
// ended sessions or 10,000 ended dashboard sign-ins, the parts merged as in a log
// that has run a while.
func BenchmarkRunningSessions(b *testing.B) {
	for _, c := range []struct {
		name           string
		ended, signIns int
	}{{"alone", 0, 0}, {"ended-sessions", 10_000, 0}, {"ended-signins", 0, 10_000}} {
		b.Run(c.name, func(b *testing.B) {
			l, db := openLog(b, clickhouse.Config{})
			fillStreams(b, l, 100, c.ended, c.signIns)
			ctx := testCtx(b, 10*time.Minute)
			optimize(b, db, "events", "sessions", "session_tasks", "open_tasks", "session_summaries")
			var read atomic.Uint64
			pctx := ch.Context(ctx, ch.WithProgress(func(p *ch.Progress) { read.Add(p.Rows) }))
			b.ResetTimer()
			for range b.N {
				got, err := l.Sessions(pctx, eventlog.Filter{Status: messages.StatusRunning, SessionsOnly: true})
				if err != nil || len(got) != 100 {
					b.Fatalf("%d running sessions (%v), want 100", len(got), err)
				}
			}
			b.ReportMetric(float64(read.Load())/float64(b.N), "rows/op")
		})
	}
}

// optimize merges the parts of tables of database db, as ClickHouse does in time;
// a table that the database lacks (a schema before it) is skipped.
func optimize(t testing.TB, db string, tables ...string) {
	t.Helper()
	ctx := testCtx(t, 10*time.Minute)
	conn := rawConn(t, serverAddr(t))
	for _, table := range tables {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name = ?", db, table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			continue
		}
		if err := conn.Exec(ctx, "OPTIMIZE TABLE "+db+"."+table+" FINAL"); err != nil {
			t.Fatal(err)
		}
	}
}

// A database of schema 7, written before the running sessions had tables of their
// own: Open migrates it to schema 8 and fills them from the events stored, so that
// the running sessions list as the general statement lists them, a session with a
// task queued behind an ended one and a child with its parent among them.
func TestMigrationListsTheRunningSessionsStored(t *testing.T) {
	addr := serverAddr(t)
	ctx := testCtx(t, time.Minute)
	db, old := databaseAt(t, ctx, addr, 7, time.Minute)
	var events []messages.Envelope
	for i := range 20 {
		events = append(events, streamEvents(t, endedName(i), "ended")...)
		events = append(events, streamEvents(t, fmt.Sprintf("%s%064x", eventlog.UISignInStreamPrefix, i), "signin")...)
	}
	events = append(events, streamEvents(t, runningName(1), "running")...)
	queued := streamEvents(t, "queued", "ended")
	again := streamEvents(t, "queued", "running")[0]
	again.ID, again.Seq, again.CorrelationID = "queued/5", 5, "queued/5"
	events = append(events, append(queued, again)...)
	child := streamEvents(t, "child", "running")[0]
	child.Payload = []byte(fmt.Sprintf(`{"input":"x","parent":{"session_id":%q,"seq":1}}`, runningName(1)))
	events = append(events, child)
	var epoch uint64
	insertRows(t, db, &epoch, events...)

	l, _ := openLog(t, clickhouse.Config{Database: db})
	optimize(t, db, "open_tasks", "session_summaries")
	got, err := l.Sessions(ctx, eventlog.Filter{Status: messages.StatusRunning, SessionsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	all, err := l.Sessions(ctx, eventlog.Filter{SessionsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	want := slices.DeleteFunc(all, func(s eventlog.SessionInfo) bool { return s.Status != messages.StatusRunning })
	var ids []string
	for _, s := range got {
		ids = append(ids, s.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(got, want) || !slices.Equal(ids, []string{"child", "queued", runningName(1)}) {
		t.Fatalf("running sessions after the migration %+v\nthe general listing's %+v", got, want)
	}
	var rows uint64
	if err := old.QueryRow(ctx, "SELECT count() FROM "+db+".open_tasks").Scan(&rows); err != nil || rows != 3 {
		t.Fatalf("open_tasks holds %d rows (%v) once merged, want the 3 tasks not ended", rows, err)
	}
}
