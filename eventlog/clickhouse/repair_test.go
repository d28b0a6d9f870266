package clickhouse_test

import (
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/messages"
)

// open_tasks keeps an ended session when a row of it was written twice: an INSERT
// retried after an outcome the writer could not know stores a task's
// task.submitted again, and the materialized view adds its row +1 again, which
// outlives the merge that collapses the pair of the task's rows. Such a session stays among the
// candidates of every listing of the running sessions (each node start, partition
// assignment and list of pending approvals), which then costs what every such
// session ever did. So does a stream that is no session and starts with an event
// that is no task.submitted (the row keyed ”, for a session with no task). The
// listing finds them ended, or no session, and removes their rows: once merged,
// open_tasks holds the running sessions only.
func TestRunningListingRemovesEndedSessionsFromOpenTasks(t *testing.T) {
	l, db := openLog(t, clickhouse.Config{})
	ctx := testCtx(t, time.Minute)
	ended := streamEvents(t, "ended", "ended")
	if err := l.Append(ctx, ended[:1]); err != nil {
		t.Fatal(err)
	}
	insertRaw(t, db, ended[:1]...) // as an INSERT retried does
	if err := l.Append(ctx, ended[1:]); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, streamEvents(t, "running", "running")); err != nil {
		t.Fatal(err)
	}
	bus := streamEvents(t, eventlog.BusStreamPrefix+"m", "ended")[1]
	bus.ID, bus.Seq = eventlog.BusStreamPrefix+"m/1", 1
	if err := l.Append(ctx, []messages.Envelope{bus}); err != nil {
		t.Fatal(err)
	}
	open := func() map[string]bool {
		t.Helper()
		optimize(t, db, "open_tasks")
		rows, err := rawConn(t, serverAddr(t)).Query(ctx, "SELECT session_id FROM "+db+".open_tasks GROUP BY session_id HAVING max(sign) > 0")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]bool{}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			out[id] = true
		}
		return out
	}
	if before := open(); !before["ended"] || !before[bus.SessionID] || !before["running"] {
		t.Fatalf("open_tasks holds %v once merged; want the ended session written twice, the bus stream and the running session", before)
	}
	for range 2 { // the second listing finds the rows removed
		got, err := l.Sessions(ctx, eventlog.Filter{Status: messages.StatusRunning, SessionsOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].ID != "running" {
			t.Fatalf("running sessions: %+v; want the running one", got)
		}
	}
	if after := open(); len(after) != 1 || !after["running"] {
		t.Fatalf("open_tasks holds %v once merged after a listing; want the running session only", after)
	}
	// The ended session's history is intact.
	if got, err := l.Read(ctx, "ended", 1); err != nil || len(got) != len(ended) {
		t.Fatalf("Read of the ended session: %d events (%v), want %d", len(got), err, len(ended))
	}
}
