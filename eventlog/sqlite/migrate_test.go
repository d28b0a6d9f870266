package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
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

// TestMigrateFromVersion4 opens a log written by a build of schema version 4, whose
// epoch index held every event: after the migration the index holds the leased
// events only (partial), Read still finds the highest epoch before fromSeq through
// it, and so hides a stale owner's events as before.
func TestMigrateFromVersion4(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", filepath.Join(dir, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	for v := range 4 {
		for _, stmt := range migrations[v] {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := db.ExecContext(ctx, "PRAGMA user_version = 4"); err != nil {
		t.Fatal(err)
	}
	// Session "s": seq 1 appended without a lease, seqs 2 and 4 by the owner of
	// epoch 1, which was evicted; the owner of epoch 2 wrote seqs 3 and 5. Seq 4 is
	// the stale write that landed late: Read hides it. Session "plain" was never
	// fenced.
	rows := []struct {
		session    string
		seq, epoch int
	}{{"s", 1, 0}, {"s", 2, 1}, {"s", 3, 2}, {"s", 4, 1}, {"s", 5, 2}, {"plain", 1, 0}, {"plain", 2, 0}}
	for _, r := range rows {
		if _, err := db.ExecContext(ctx, `INSERT INTO events (session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload, epoch)
			VALUES (?, ?, ?, 'model.requested', 1, '', '', ?, 'session', '{}', ?)`, r.session, r.seq, fmt.Sprintf("%s/%d", r.session, r.seq), r.seq, r.epoch); err != nil {
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
	wantEpochIndex(ctx, t, l)
	seqs := func(session string, from uint64) []uint64 {
		events, err := l.Read(ctx, session, from)
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, e := range events {
			out = append(out, e.Seq)
		}
		return out
	}
	for _, c := range []struct {
		session string
		from    uint64
		want    []uint64
	}{
		{"s", 0, []uint64{1, 2, 3, 5}},
		{"s", 4, []uint64{5}}, // epoch 2 before seq 4: the stale seq 4 is hidden
		{"s", 3, []uint64{3, 5}},
		{"plain", 2, []uint64{2}},
	} {
		if got := seqs(c.session, c.from); !slices.Equal(got, c.want) {
			t.Errorf("Read(%s, %d) after the migration: seqs %v, want %v", c.session, c.from, got, c.want)
		}
	}
}

// TestEpochIndexHoldsLeasedEvents checks the epoch index of a new log: it is
// partial (events appended without a lease, all of an embedded node's, have no
// entry), and Read's lookup of the highest epoch before fromSeq searches it by
// session and epoch, from the highest epoch down, without sorting, so that it
// costs O(1) rather than a read of every earlier event of the stream.
func TestEpochIndexHoldsLeasedEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := openTemp(ctx, t)
	wantEpochIndex(ctx, t, l)
}

// wantEpochIndex fails t unless l's epoch index (events_by_epoch_start, since
// schema 8) is partial and readEpochQuery searches it.
func wantEpochIndex(ctx context.Context, t *testing.T, l *Log) {
	t.Helper()
	var partial int
	if err := l.rdb.QueryRowContext(ctx, `SELECT partial FROM pragma_index_list('events') WHERE name = 'events_by_epoch_start'`).Scan(&partial); err != nil {
		t.Fatalf("index events_by_epoch_start: %v", err)
	}
	if partial != 1 {
		t.Errorf("index events_by_epoch_start is not partial: every event appended without a lease costs an entry")
	}
	rows, err := l.rdb.QueryContext(ctx, "EXPLAIN QUERY PLAN "+readEpochQuery, "s", 4)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var (
			id, parent, unused int
			detail             string
		)
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	search := false
	for _, d := range plan {
		search = search || strings.Contains(d, "SEARCH events USING COVERING INDEX events_by_epoch_start (session_id=? AND epoch>?)")
		if strings.HasPrefix(d, "SCAN events") || strings.Contains(d, "TEMP B-TREE") {
			search = false
			break
		}
	}
	if !search {
		t.Errorf("the lookup of the highest epoch before a seq does not search events_by_epoch_start by session and epoch alone; plan:\n%s", strings.Join(plan, "\n"))
	}
}

// A log of schema 8 keeps its owners when migrated to schema 9, none of them
// released; an owner's Release then marks its own row.
func TestMigrationKeepsOwnersUnreleased(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", filepath.Join(dir, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range append(slices.Concat(migrations[:8]...), "PRAGMA user_version = 8",
		`INSERT INTO ownership (partition, epoch, node, ts_us) VALUES (0, 1, 'a', 1), (1, 1, 'a', 1), (1, 2, 'b', 2)`) {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := Open(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	want := map[int]eventlog.Ownership{0: {Node: "a", Epoch: 1}, 1: {Node: "b", Epoch: 2}}
	got, err := l.Owners(ctx, []int{0, 1, 2})
	if err != nil || !maps.Equal(got, want) {
		t.Fatalf("Owners after the migration = %v, %v; want %v", got, err, want)
	}
	if err := l.Release(ctx, "a", 1, []int{0, 1}, 77); err != nil {
		t.Fatal(err)
	}
	want[0] = eventlog.Ownership{Node: "a", Epoch: 1, ReleasedUS: 77}
	if got, err = l.Owners(ctx, []int{0, 1, 2}); err != nil || !maps.Equal(got, want) {
		t.Fatalf("Owners after a release = %v, %v; want %v", got, err, want)
	}
}

// A log of schema 9 keeps its owners and their releases when migrated to schema
// 10, none of them marked; an owner's MarkPublished then marks its own row.
func TestMigrationKeepsOwnersUnmarked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", filepath.Join(dir, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range append(slices.Concat(migrations[:9]...), "PRAGMA user_version = 9",
		`INSERT INTO ownership (partition, epoch, node, ts_us, released_us) VALUES (0, 1, 'a', 1, 5), (1, 1, 'a', 1, 0), (1, 2, 'b', 2, 0)`) {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := Open(ctx, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	want := map[int]eventlog.Ownership{0: {Node: "a", Epoch: 1, ReleasedUS: 5}, 1: {Node: "b", Epoch: 2}}
	got, err := l.Owners(ctx, []int{0, 1, 2})
	if err != nil || !maps.Equal(got, want) {
		t.Fatalf("Owners after the migration = %v, %v; want %v", got, err, want)
	}
	if err := l.MarkPublished(ctx, "b", 2, []int{0, 1}, 88); err != nil {
		t.Fatal(err)
	}
	want[1] = eventlog.Ownership{Node: "b", Epoch: 2, PublishedUS: 88}
	if got, err = l.Owners(ctx, []int{0, 1, 2}); err != nil || !maps.Equal(got, want) {
		t.Fatalf("Owners after a mark = %v, %v; want %v", got, err, want)
	}
}
