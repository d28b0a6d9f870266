package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// A log written by schema 1 lists a session with tasks queued behind an ended one
// as completed; migrating to schema 2 counts its tasks from the events, so that it
// lists as running (and a node resumes it) until its last task ends.
func TestMigrationCountsQueuedTasks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", filepath.Join(dir, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range append(migrations[0], "PRAGMA user_version = 1") {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	// Session "q": tasks 1 and 2 submitted, task 1 ended; schema 1 kept the status of
	// the highest-seq task.* event. Session "done": one task, ended.
	rows := []struct {
		session string
		seq     int
		typ     messages.Type
	}{
		{"q", 1, messages.TypeTaskSubmitted}, {"q", 2, messages.TypeTaskSubmitted}, {"q", 3, messages.TypeModelRequested},
		{"q", 4, messages.TypeModelResponded}, {"q", 5, messages.TypeTaskCompleted},
		{"done", 1, messages.TypeTaskSubmitted}, {"done", 2, messages.TypeTaskFailed},
	}
	for _, r := range rows {
		if _, err := db.ExecContext(ctx, `INSERT INTO events (session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload)
			VALUES (?, ?, ?, ?, 1, '', '', ?, 'session', '{}')`, r.session, r.seq, fmt.Sprintf("%s/%d", r.session, r.seq), string(r.typ), r.seq); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []struct {
		id, status    string
		statusSeq, n  int
		steps, last   int
		started, upto int
	}{{"q", messages.StatusCompleted, 5, 5, 1, 5, 1, 5}, {"done", messages.StatusFailed, 2, 2, 0, 2, 1, 2}} {
		if _, err := db.ExecContext(ctx, `INSERT INTO sessions (session_id, status, status_seq, events, steps, last_seq, started_us, updated_us)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, s.id, s.status, s.statusSeq, s.n, s.steps, s.last, s.started, s.upto); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	l, err := Open(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
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
	// The counts go on from the migrated values: task 2 ends, and q is completed.
	end, err := messages.NewEnvelope(&messages.TaskCompleted{Output: "two"})
	if err != nil {
		t.Fatal(err)
	}
	end.ID, end.SessionID, end.Seq, end.TS, end.Actor = "q/6", "q", 6, 6, "session"
	if err := l.Append(ctx, []messages.Envelope{end}); err != nil {
		t.Fatal(err)
	}
	if got := status(); got["q"] != messages.StatusCompleted {
		t.Fatalf("after the last task ended: %v, want q completed", got)
	}
}
