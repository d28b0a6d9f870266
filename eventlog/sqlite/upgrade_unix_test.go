//go:build unix

package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// schema4ReadEpoch is the statement with which a build of schema 4 read the
// highest epoch before fromSeq: it names the index, without epoch > 0.
const schema4ReadEpoch = `SELECT coalesce((SELECT epoch FROM events INDEXED BY events_by_epoch
		WHERE session_id = ? AND seq < ? ORDER BY epoch DESC LIMIT 1), 0)`

// A rolling upgrade of a Shared log of schema 4: a process of that build runs
// while one of this build opens the log and migrates it. The older process's
// statement, prepared before, names the index events_by_epoch, which it could not
// use once partial (schema 5): every Read with fromSeq > 1 would fail. So the
// migration keeps the full index while another process holds the log, and the
// older process keeps reading; an Open that finds the log held by nobody else
// makes the index partial, and drops it (schema 8).
func TestRollingUpgradeKeepsTheEpochIndexOfAnOlderProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", filepath.Join(dir, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
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
	if _, err := db.ExecContext(ctx, `INSERT INTO events (session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload, epoch)
		VALUES ('s', 1, 's/1', 'task.submitted', 1, '', '', 1, 'session', '{}', 0), ('s', 2, 's/2', 'model.requested', 1, '', '', 2, 'session', '{}', 3)`); err != nil {
		t.Fatal(err)
	}
	// The older process: it holds the directory as a Shared opener does, and has
	// prepared its statement.
	older, err := lockDir(context.Background(), dir, true, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	oldRead, err := db.PrepareContext(ctx, schema4ReadEpoch)
	if err != nil {
		t.Fatal(err)
	}
	defer oldRead.Close()
	readEpoch := func() (int64, error) {
		var epoch int64
		err := oldRead.QueryRowContext(ctx, "s", 3).Scan(&epoch)
		return epoch, err
	}

	l, err := Open(ctx, Config{Dir: dir, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	if epoch, err := readEpoch(); err != nil || epoch != 3 {
		t.Fatalf("the older process reads epoch %d (%v) after the migration, want 3", epoch, err)
	}
	if events, err := l.Read(ctx, "s", 2); err != nil || len(events) != 1 {
		t.Fatalf("this build reads %d events (%v) beside it, want 1", len(events), err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := unlockDir(older, true); err != nil {
		t.Fatal(err)
	}

	// Alone, Open drops the index (schema 8 has events_by_epoch_start instead),
	// which the older statement names.
	l, err = Open(ctx, Config{Dir: dir, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var n int
	if err := l.rdb.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE name = 'events_by_epoch'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("events_by_epoch: %d (%v) once opened alone, want it dropped", n, err)
	}
	wantEpochIndex(ctx, t, l)
	if _, err := readEpoch(); err == nil || !strings.Contains(err.Error(), "no such index") {
		t.Fatalf("the statement of schema 4 without its index: %v, want no such index", err)
	}
	if events, err := l.Read(ctx, "s", 2); err != nil || len(events) != 1 {
		t.Fatalf("this build reads %d events (%v), want 1", len(events), err)
	}
}

// schema6ReadEpoch is the statement with which a build of schema 5 to 7 read the
// highest epoch before fromSeq: it names index events_by_epoch.
const schema6ReadEpoch = `SELECT coalesce((SELECT epoch FROM events INDEXED BY events_by_epoch
		WHERE session_id = ? AND epoch > 0 AND seq < ? ORDER BY epoch DESC LIMIT 1), 0)`

// A rolling upgrade of a Shared log of schema 6: a process of that build runs, and
// writes, while one of this build opens the log and migrates it. The older
// process's writer relies on the UNIQUE (id) constraint to skip an event whose ID
// is stored at another position, and its Read names index events_by_epoch, so the
// migration keeps both while another process holds the log; an Open that finds
// the log held by nobody else drops them, and records the aliases the older
// process wrote meanwhile.
func TestRollingUpgradeKeepsTheIDConstraintOfAnOlderProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	db := schema6Log(ctx, t, dir, []messages.Envelope{idEvent(t, "s", 1, "s/1"), idEvent(t, "s", 2, "task-2")})
	older, err := lockDir(context.Background(), dir, true, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	oldInsert, err := db.PrepareContext(ctx, schema6Insert)
	if err != nil {
		t.Fatal(err)
	}
	defer oldInsert.Close()
	oldRead, err := db.PrepareContext(ctx, schema6ReadEpoch)
	if err != nil {
		t.Fatal(err)
	}
	defer oldRead.Close()
	readEpoch := func() (int64, error) {
		var epoch int64
		err := oldRead.QueryRowContext(ctx, "s", 3).Scan(&epoch)
		return epoch, err
	}
	insert := func(e messages.Envelope) int64 {
		t.Helper()
		res, err := oldInsert.ExecContext(ctx, e.SessionID, e.Seq, e.ID, e.TS)
		if err != nil {
			t.Fatal(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	l, err := Open(ctx, Config{Dir: dir, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if err := l.rdb.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != SchemaVersion {
		t.Fatalf("schema version %d (%v) after the migration, want %d", v, err, SchemaVersion)
	}
	if epoch, err := readEpoch(); err != nil || epoch != 0 {
		t.Fatalf("the older process reads epoch %d (%v) after the migration, want 0", epoch, err)
	}
	// The older process's writer still skips an ID stored elsewhere, derived or not.
	for _, e := range []messages.Envelope{idEvent(t, "o", 1, "s/1"), idEvent(t, "o", 1, "task-2")} {
		if n := insert(e); n != 0 {
			t.Fatalf("the older process stored %s beside this build's migration", describeEvents([]messages.Envelope{e}))
		}
	}
	// It writes an alias of z/1; this build refuses z/1 then, and its own alias
	// of s/1 too.
	if n := insert(idEvent(t, "o", 2, "z/1")); n != 1 {
		t.Fatal("the older process could not write an alias")
	}
	wantAppend(ctx, t, l, eventlog.ErrSeqConflict, idEvent(t, "z", 1, "z/1"))
	wantAppend(ctx, t, l, eventlog.ErrSeqConflict, idEvent(t, "o", 3, "s/1"))
	wantAppend(ctx, t, l, nil, idEvent(t, "o", 3, "o/3"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := unlockDir(older, true); err != nil {
		t.Fatal(err)
	}

	// Alone, Open drops the constraint, and knows the older process's alias.
	l, err = Open(ctx, Config{Dir: dir, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	wantIDIndex(ctx, t, l.rdb)
	wantAppend(ctx, t, l, eventlog.ErrSeqConflict, idEvent(t, "z", 1, "z/1"))
	wantAppend(ctx, t, l, eventlog.ErrSeqConflict, idEvent(t, "x", 1, "task-2"))
	wantIDs(ctx, t, l, "o", "z/1", "o/3")
	wantIDs(ctx, t, l, "s", "s/1", "task-2")
	wantEpochIndex(ctx, t, l)
	if _, err := readEpoch(); err == nil || !strings.Contains(err.Error(), "no such index") {
		t.Fatalf("the statement of schema 6 without its index: %v, want no such index", err)
	}
}
