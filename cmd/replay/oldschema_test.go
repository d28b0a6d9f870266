package main

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
)

// setSchema4 turns the log in dir back into what a schema-4 build left: the full
// epoch index, no running-sessions index, no released_us nor published_us in
// ownership, no fold_snapshots, user_version 4 (migrations 5, 6, 9, 10 and 11
// undone; the events table keeps what 7 and 8 changed, which migrating it again
// from 4 redoes).
func setSchema4(t *testing.T, dir string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`DROP INDEX sessions_running`,
		`DROP INDEX IF EXISTS events_by_epoch`, // schema 8 dropped it
		`CREATE INDEX events_by_epoch ON events (session_id, epoch, seq)`,
		`ALTER TABLE ownership DROP COLUMN released_us`,
		`ALTER TABLE ownership DROP COLUMN published_us`,
		`DROP TABLE IF EXISTS fold_snapshots`,
		`DROP TABLE IF EXISTS summary_lag`,
		`PRAGMA user_version = 4`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// A user who upgrades replay reads a log an older build wrote: replay migrates it
// when no node holds it, and says so.
func TestReadCommandsMigrateALogOfAnOlderBuild(t *testing.T) {
	dir := t.TempDir()
	id := recordSession(t, dir, "What is 12 * (7 + 5)?")
	setSchema4(t, dir)

	code, out, errs := replay(t, "list", "--data", dir)
	if code != 0 || !strings.Contains(out, id) {
		t.Fatalf("list of a schema-4 log: exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(errs, "migrated the event log") {
		t.Errorf("list did not say it migrated the log: %q", errs)
	}
	if code, out, errs := replay(t, "verify", "--data", dir, id); code != 0 {
		t.Fatalf("verify after the migration: exit %d\n%s\n%s", code, out, errs)
	}
	// Migrated once: the next command says nothing of it.
	if code, _, errs := replay(t, "list", "--data", dir); code != 0 || strings.Contains(errs, "migrated") {
		t.Fatalf("second list: exit %d, stderr %q", code, errs)
	}
}

// While a node holds the log, replay does not migrate it and says why it cannot read it.
func TestReadCommandsLeaveALogANodeHolds(t *testing.T) {
	dir := t.TempDir()
	recordSession(t, dir, "What is 12 * (7 + 5)?")
	setSchema4(t, dir)
	// A writer of this build holds the directory's lock, as a running node does; it
	// migrates the log when it opens, so take the lock with the schema still at 4 by
	// opening, then undoing the migration under it.
	l, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	setSchema4(t, dir)
	code, _, errs := replay(t, "list", "--data", dir)
	if code == 0 || !strings.Contains(errs, "schema older than this build reads") || !strings.Contains(errs, "could not migrate it itself") {
		t.Fatalf("list while a node holds a schema-4 log: exit %d, stderr %q; want a failure naming the old schema and why it was not migrated", code, errs)
	}
}
